"""Work off the GUI thread: training runs (`handle.RunHandle`, implemented by ThreadRun, ProcessRun and RemoteRun, held
one at a time by `controller.RunController`) and background jobs (`jobs.BackgroundJob`, `jobs.JobRunner`).
"""
