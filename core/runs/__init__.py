"""What comes after a run, over the lab's tools: file_predict.py (a whole file scored by a run's Predictor in
its task's input format: the streaming reader of file_input.py, bad rows reported by line, progress, the
output written by predict_output.py and renamed into place when complete). The CLI's commands here only parse
their arguments and print; what differs by task is each task's to say (core.tasks.serving).
"""
