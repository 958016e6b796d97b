"""`FailureShare` (slo/gate/failure_share.py): an SLO on one failure kind's share, `invalid_output`, and
`CancelledShare`: on the share the client cancelled, `cancelled`."""

import pytest
from slogate.slo.gate.early_stop import look
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.objective_kind import SloSpecError
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import objective_json
from slogate.slo.gate.spec import parse_spec
from slogate.slo.gate.verdict import Verdict


def store(every: int, n: int = 400) -> MetricsStore:
    """`n` requests of which every `every`-th output was invalid, and as many timeouts: only the first count."""
    s = MetricsStore()
    for i in range(n):
        kind = ErrorKind.INVALID_OUTPUT if i % every == 0 else ErrorKind.TIMEOUT if i % every == 1 else None
        s.add(
            RequestRecord("shared" if i % 2 else "unique", 1000.0 + i / 10, e2e_us=1000, ttft_us=500, error_kind=kind)
        )
    return s


def test_an_slo_on_invalid_output_counts_that_kind_alone() -> None:
    spec = parse_spec({"slos": [{"metric": "invalid_output", "max": 0.01}], "min_samples": 10})
    (o,) = spec.objectives
    assert (o.name, o.describe()) == ("invalid_output-all", "invalid_output[all] <= 0.01")
    failing = evaluate(spec, store(every=4))
    assert failing.status == Verdict.FAIL and failing.results[0].observed == 0.25  # timeouts left out
    assert objective_json(failing.results[0])["target"] == {"max": 0.01}
    assert [lk.state for lk in look(spec, store(every=4), 0.99)] == ["fail"]  # a ceiling is decided early
    passing = evaluate(spec, store(every=1000))  # one invalid output in 400 requests
    assert passing.status == Verdict.PASS and passing.results[0].observed == 0.0025
    per_class = parse_spec({"slos": [{"metric": "invalid_output", "max": 0, "class": "shared"}], "min_samples": 10})
    assert evaluate(per_class, store(every=4)).results[0].observed == 0  # every invalid one was `unique`
    with pytest.raises(SloSpecError, match=r"field 'max': must be <= 1, got 2"):
        parse_spec({"slos": [{"metric": "invalid_output", "max": 2}]})


def test_an_slo_on_cancelled_is_the_share_of_every_request_sent_and_decided_early() -> None:
    s = MetricsStore()
    for i in range(300):  # one in three hung up by the client after its first token
        kind = ErrorKind.CANCELLED if i % 3 == 0 else None
        s.add(RequestRecord("shared", 1000.0 + i / 10, e2e_us=1000, ttft_us=500, error_kind=kind))
    spec = parse_spec({"slos": [{"metric": "cancelled", "min": 0.2, "max": 0.5}], "min_samples": 10})
    result = evaluate(spec, s).results[0]
    assert result.observed == pytest.approx(1 / 3) and result.result == "pass"  # 100 of 100 + 200
    assert s.get("all").failures == 0  # not failures
    ceiling = parse_spec({"slos": [{"metric": "cancelled", "max": 0.1}], "min_samples": 10})
    (early,) = look(ceiling, s, 0.99)
    assert early.state == "fail"  # a ceiling alone is decided early
    assert evaluate(ceiling, s).status == Verdict.FAIL
