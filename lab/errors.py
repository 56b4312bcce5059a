"""The error a bad setting raises. It sits at the bottom of the package so the code that
checks a setting where it is used (the device a config names, say) can raise it without
importing the config above it."""


class ConfigError(ValueError):
    """A preset or override names an unknown key or holds a bad value."""
