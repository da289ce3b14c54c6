"""fabricsim."""
