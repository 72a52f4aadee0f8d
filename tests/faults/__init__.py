"""The fault suite: kills, restarts and fuzzing, judged by an independent checker."""
