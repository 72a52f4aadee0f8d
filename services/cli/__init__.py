"""The ``agui-relay`` command line: one module per command group, wired in ``main``."""
