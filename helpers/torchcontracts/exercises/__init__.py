"""The "Try it" exercises of each lesson: ``lessonNN.EXERCISES`` maps an id ("01.1") to an ``Exercise``.

A lesson cell writes a stub, then calls ``EXERCISES["01.1"].check(my_function)``. The checks are
the labs' ``Check`` objects (see ``torchcontracts.tryit``); tests/test_tryit.py runs each against a
reference answer and the common wrong answers.
"""
