"""The supervisor's restart backoff (the processes themselves: tests/acceptance/test_workers.py)."""

from gateway.processes import HEALTHY_AFTER_S, StartFailed, restart_delay


def test_the_restart_delay_doubles_from_a_quarter_second_up_to_thirty_seconds():
    assert [restart_delay(n) for n in range(1, 10)] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert restart_delay(10_000) == 30.0
    assert HEALTHY_AFTER_S == 60.0  # the docs (SCALING.md, OPERATIONS.md) say when the backoff starts over


def test_a_start_failure_says_how_the_process_ended():
    assert str(StartFailed(12, -9)) == "gateway process 12 was killed by SIGKILL during start-up"
    assert str(StartFailed(12, 3)) == "gateway process 12 exited with code 3 during start-up"
    assert str(StartFailed(12, -99)) == "gateway process 12 was killed by signal 99 during start-up"
