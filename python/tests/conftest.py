import os
import sys

# kernels.py sits beside the tests.
sys.path.insert(0, os.path.dirname(__file__))
