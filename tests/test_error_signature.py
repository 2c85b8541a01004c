"""An error's signature (type, message, place) says when a retry failed the same way as the attempt
before it: the place is the innermost frame in hpo or the workload, by module and function, so a
line that moved or a library frame does not make the same error look different."""

from __future__ import annotations

import pytest
import torch

from hpo.errors import error_signature


def _caught(fn) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def _loss(first_line: bool, message: str = "the user's loss divides by an empty mask"):
    if first_line:
        raise ValueError(message)
    # Another line of the same function: an edited file, the same error.
    raise ValueError(message)


def _in_torch():
    return torch.zeros(2, 3) @ torch.zeros(2, 3)  # raises inside torch's own code


def test_the_same_error_from_another_line_of_the_same_function_has_the_same_signature():
    first, moved = _caught(lambda: _loss(True)), _caught(lambda: _loss(False))
    assert error_signature(first) == error_signature(moved)
    assert error_signature(first) == (f"ValueError: the user's loss divides by an empty mask @ {__name__}:_loss")


def test_another_message_or_type_is_another_error():
    same = error_signature(_caught(lambda: _loss(True)))
    assert error_signature(_caught(lambda: _loss(True, "reset by peer"))) != same
    assert error_signature(KeyError("x")) != error_signature(ValueError("x"))


def test_the_place_is_the_workloads_frame_that_called_into_a_library():
    signature = error_signature(_caught(_in_torch))
    assert signature.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert signature.endswith(f" @ {__name__}:_in_torch")
