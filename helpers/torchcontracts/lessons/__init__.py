"""One folder per lesson (``lNN_slug``): its helpers, its Try-it exercises (``tryit``) and its labs' checks.

Lesson folders import ``core`` and ``checks``, never each other; ``torchcontracts.course`` lists them.
"""
