"""The host collectors read the real procfs sysfs fixture through ``real_sysfs`` (tests/conftest.py)."""
