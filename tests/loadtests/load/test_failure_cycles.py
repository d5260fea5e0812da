"""A failed request leaves no reference cycle behind: Locust's raw responses and the SDK's
exceptions hold each other through ``error``/``response`` and through tracebacks, and only a
full garbage collection, a stall of every stream, would free them (``loop_hygiene``)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from loadtests.load.failure_cycles import forget_failure, forget_traceback

pytestmark = pytest.mark.fast


class Response:
    """As Locust's FastResponse after a non-2xx: ``error`` holds the exception that holds it."""

    error: BaseException | None = None


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Only reference counting frees anything while a test runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def failed_response() -> Response:
    response = Response()
    try:
        try:
            raise KeyError("underneath")
        except KeyError as cause:
            raise ConnectionError("HTTP 400") from cause
    except ConnectionError as exc:
        exc.response = response  # type: ignore[attr-defined]
        response.error = exc
    return response


def test_a_failed_response_is_freed_by_reference_counting_once_forgotten(no_collector: None) -> None:
    response = failed_response()
    error = response.error
    assert error is not None and error.__traceback__ is not None
    forget_failure(response)
    assert response.error is None and error.response is None  # type: ignore[attr-defined]
    assert error.__traceback__ is None and error.__cause__ is not None and error.__cause__.__traceback__ is None
    gone = weakref.ref(response)
    del response, error
    assert gone() is None


def test_a_failed_response_left_alone_is_a_cycle(no_collector: None) -> None:
    """The control: without ``forget_failure`` the same response outlives its last name."""
    response = failed_response()
    kept = weakref.ref(response)
    del response
    assert kept() is not None
    gc.collect()
    assert kept() is None


def test_every_exception_of_a_chain_loses_its_traceback() -> None:
    try:
        try:
            try:
                raise ValueError("first")
            except ValueError:
                raise KeyError("during the first") from None
        except KeyError as context:
            raise RuntimeError("last") from context
    except RuntimeError as exc:
        caught = exc
    chain = [caught, caught.__cause__, caught.__cause__.__context__]  # type: ignore[union-attr]
    assert all(link is not None and link.__traceback__ is not None for link in chain)
    forget_traceback(caught)
    assert all(link.__traceback__ is None for link in chain)  # type: ignore[union-attr]


def test_nothing_to_forget_is_fine() -> None:
    forget_traceback(None)
    forget_failure(object())
