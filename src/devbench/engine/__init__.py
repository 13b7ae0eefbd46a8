"""The measuring engine: devices, blocks timed to a precision, the measuring process, the suite's base."""
