"""What comes after a run, over the engine and the lab: evaluation and its report (evaluate.py,
evaluation_report.py), the Predictor (predict.py), a whole file scored by it (file_predict.py, file_input.py,
predict_output.py), deployable exports (export.py) and the standalone server every export
carries (serve.py and its parts serve_http.py, serve_lines.py, serve_program.py), run comparison (compare.py)
and TensorBoard event files from a run's metrics (tensorboard_export.py). The CLI's commands only parse their
arguments and print; what differs by task is each task's to say (core.tasks.serving).
"""
