"""The checkout's paths, for tests in any folder under tests/ (conftest.py
puts the checkout and this folder on sys.path once)."""
import os

TESTS = os.path.dirname(os.path.abspath(__file__))      # tests/: helpers, data
ROOT = os.path.dirname(TESTS)                           # the checkout
