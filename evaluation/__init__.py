"""evaluation: detectors and a static-rule baseline scored against fabricsim's ground truth.

Apart from fabricsim so the simulator depends on the collectors only, and from the detectors so
no production code carries the scoring or the baseline.
"""
