"""What comes after a run, over the engine and the lab: evaluation and its report, the Predictor and a whole file
scored by it (file_predict, file_input, predict_output), deployable exports and the standalone server every export
carries (serve.py and its parts), run comparison, the run queue and TensorBoard event files from a run's metrics. The
CLI's commands only parse their arguments and print; what differs by task is each task's to say (core.tasks.serving).
"""
