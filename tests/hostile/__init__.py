"""The hostile-input suite: single hostile requests against the stack under ``agui-relay up``."""
