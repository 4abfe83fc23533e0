"""Public checks of each lab, one module per lab (``lab01_strides`` ...). Hidden checks live in solutions/."""
