import sys

from app.main import run_app
from core.process import exit_process

exit_process(run_app(sys.argv[1:]))
