"""The window's panels: each shows one part of core's state and sends nothing but requests back.

Long work goes through app.run.jobs.BackgroundJob; see docs/ARCHITECTURE.md ("Where to add things").
"""
