"""The engine under transient faults: plan and apply converge in one run.

Faults are injected by the local server (``tsmigrate.local.faults``), seeded; every API the
engine calls fails about 30% of the time with a mix of kinds: rejected requests (busy,
unavailable, capacity), ambiguous ones (500, timeout) and writes that were done but answered
with a timeout (``done_timeout``), which only a read can tell apart from a failure.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import urllib3.exceptions
from breaking_proxy import BreakingProxy
from cliproject import CREDENTIALS, PacingClock, project, run
from hypothesis import given
from hypothesis import strategies as st
from samples import DAY, events
from tablestore import OTSClient, OTSServiceError

from tsmigrate.instance import adapter, retry
from tsmigrate.instance.apply import apply, live_catalog
from tsmigrate.instance.state import STATE_TABLE, State
from tsmigrate.local.faults import FaultPlan
from tsmigrate.planning.plan import make_plan
from tsmigrate.schema import Catalog, SearchField, SearchIndex, physical

IDENTITY = "local:test"
# About 30% of requests fail, every kind mixed.
MIXED = "internal=0.08,timeout=0.08,server_busy=0.06,unavailable=0.04,capacity=0.03,done_timeout=0.05"


def _models() -> Catalog:
    second = events(
        name="audit",
        search_indexes=[SearchIndex("audit_search", [SearchField("user", "KEYWORD")],
                                   time_to_live=30 * DAY)],
        secondary_indexes=(),
    )
    return Catalog([events(), second])


@pytest.fixture
def fast_retries(monkeypatch):
    """The shared policy, with short delays so a test with hundreds of faults stays quick."""
    monkeypatch.setattr(retry.RETRY_POLICY, "base_delay_s", 0.005)
    monkeypatch.setattr(retry.RETRY_POLICY, "throttled_delay_s", 0.01)


@pytest.mark.parametrize("seed", [7, 11, 23])
def test_inspection_converges_under_search_index_faults(ots_client, ots_server_options,
                                                       fast_retries, seed):
    apply(ots_client, _models(), target_identity=IDENTITY)
    clean = live_catalog(ots_client)
    ots_server_options.faults = FaultPlan.parse(
        f"internal@ListSearchIndex|DescribeSearchIndex|DescribeTable|ListTable|GetRow=0.3,seed={seed}"
    )
    for _ in range(5):
        assert live_catalog(ots_client) == clean


@pytest.mark.parametrize("seed", [7, 11])
def test_apply_converges_in_one_run_under_mixed_faults(ots_client, ots_server_options,
                                                       fast_retries, seed):
    ots_server_options.faults = FaultPlan.parse(f"{MIXED},seed={seed}")
    models = _models()
    outcome = apply(ots_client, models, target_identity=IDENTITY)
    assert outcome.executed == 4
    assert not make_plan(live_catalog(ots_client), models).has_changes
    ots_server_options.faults = None
    assert physical(adapter.inspect(ots_client, exclude=(STATE_TABLE,))).fingerprint() == \
        outcome.plan.target_fingerprint
    statuses = [h["status"] for h in State(ots_client).history()]
    assert statuses.count("done") == 4 and "failed" not in statuses


def test_writes_done_but_answered_with_a_timeout_are_not_repeated(ots_client, ots_server_options,
                                                                  fast_retries):
    """Every create answers OTSTimeout after it was carried out: a read tells it landed."""
    ots_server_options.faults = FaultPlan.parse(
        "done_timeout@CreateTable|CreateSearchIndex=1.0,done_timeout@PutRow=0.3,seed=3"
    )
    models = _models()
    outcome = apply(ots_client, models, target_identity=IDENTITY)
    assert outcome.executed == 4
    ots_server_options.faults = None
    assert not make_plan(live_catalog(ots_client), models).has_changes


def test_without_tsmigrates_policy_a_fault_surfaces(ots_instance, ots_server_options):
    """A client built with a policy of its own keeps it: the engine does not retry behind it."""
    from tablestore import NoRetryPolicy

    client = ots_instance.client(retry_policy=NoRetryPolicy())
    ots_server_options.faults = FaultPlan.parse("internal@ListTable=1.0")
    with pytest.raises(OTSServiceError):
        live_catalog(client)


@pytest.mark.slow
def test_cli_plan_and_apply_converge_in_one_run(tmp_path: Path, ots_instance, ots_server_options,
                                                fast_retries, monkeypatch):
    """Faults at about 30% on every API, table operations rate-limited too (as `local serve
    --fault ... --table-ops-per-s 40` gives them), against the commands as the user runs them."""
    proj = project(tmp_path, tables=3)
    ots_server_options.faults = FaultPlan.parse(f"{MIXED},seed=5")
    ots_server_options.table_ops_per_s = 40
    # The pacer's waits pass on its clock and the server's at once, not in real time.
    PacingClock(ots_instance.server).install(monkeypatch)
    target = ["--endpoint", ots_instance.endpoint, "--instance", ots_instance.instance]
    planned = run(proj, "plan", "--detailed-exitcode", *target, extra_env=CREDENTIALS)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    applied = run(proj, "apply", "--yes", *target, extra_env=CREDENTIALS)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Applied 6 step(s)." in applied.stdout
    again = run(proj, "plan", "--detailed-exitcode", *target, extra_env=CREDENTIALS)
    assert again.returncode == 0, again.stdout + again.stderr


# --- the policy itself (pure) ---------------------------------------------------------------------

_CODES = ["OTSServerBusy", "OTSTimeout", "OTSInternalServerError", "OTSParameterInvalid",
          "OTSQuotaExhausted", "OTSObjectAlreadyExist", "OTSTableNotReady"]


@given(st.integers(0, 40), st.sampled_from(_CODES), st.sampled_from([403, 500, 503]),
       st.sampled_from(sorted(retry.IDEMPOTENT_APIS | {"CreateTable", "CreateSearchIndex"})))
def test_delays_are_capped_jittered_and_grow(retry_times, code, status, api):
    policy = retry.TsmigrateRetryPolicy(seed=retry_times)
    exc = OTSServiceError(status, code, "Too frequent table operations.")
    delay = policy.get_retry_delay(retry_times, exc, api)
    base = policy.throttled_delay_s if code == "OTSServerBusy" or code == "OTSQuotaExhausted" \
        else policy.base_delay_s
    limit = min(policy.max_delay_s, base * 2 ** retry_times)
    assert limit / 2 <= delay <= limit
    assert policy.should_retry(policy.max_retries, exc, api) is False


def test_which_errors_are_retried_where():
    timeout = OTSServiceError(503, "OTSTimeout", "Operation timeout.")
    busy = OTSServiceError(503, "OTSServerBusy", "Server is busy.")
    quota = OTSServiceError(403, "OTSQuotaExhausted", "Number of tables exceeded the quota.")
    frequent = OTSServiceError(403, "OTSQuotaExhausted", "Too frequent table operations.")
    policy = retry.RETRY_POLICY
    # Reads the SDK does not retry on a timeout are retried here; a create is not (a read checks).
    assert policy.should_retry(0, timeout, "DescribeSearchIndex")
    assert policy.should_retry(0, timeout, "ListSearchIndex")
    assert not policy.should_retry(0, timeout, "CreateSearchIndex")
    # A rejected request is retried on any API; a quota that is not throttling never.
    assert policy.should_retry(0, busy, "CreateTable") and policy.should_retry(0, frequent, "CreateTable")
    assert not policy.should_retry(0, quota, "ListTable")
    # Socket errors: retried for reads; a connection never opened, for every API.
    reset = ConnectionResetError("reset by peer")
    refused = urllib3.exceptions.NewConnectionError(None, "refused")
    assert policy.should_retry(0, reset, "GetRange") and not policy.should_retry(0, reset, "CreateTable")
    assert policy.should_retry(0, refused, "CreateTable")


def test_retrying_repeats_a_call_until_it_passes():
    answers = iter([OTSServiceError(500, "OTSInternalServerError", "x"),
                    urllib3.exceptions.ProtocolError("connection aborted"), "done"])

    def call():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert retry.retrying(call, policy=retry.TsmigrateRetryPolicy(base_delay_s=0.001)) == "done"
    with pytest.raises(OTSServiceError):
        retry.retrying(lambda: (_ for _ in ()).throw(OTSServiceError(500, "OTSTimeout", "x")),
                       idempotent=False)


# --- socket errors: a real TCP proxy that breaks connections ------------------------------------


def test_plan_and_apply_survive_broken_connections(ots_instance, fast_retries):
    proxy = BreakingProxy(ots_instance.endpoint, fraction=0.25, seed=4)
    try:
        client = OTSClient(proxy.endpoint, ots_instance.access_key_id,
                           ots_instance.access_key_secret, ots_instance.instance)
        models = _models()
        outcome = apply(client, models, target_identity=IDENTITY)
        assert outcome.executed == 4
        assert not make_plan(live_catalog(client), models).has_changes
        assert proxy.dropped > 5
    finally:
        proxy.close()


def _attempts(client: OTSClient, before=None) -> list[str]:
    """Count the requests the client's connection sends (its retries included); ``before(sent)``
    is called as each is about to go."""
    sent: list[str] = []
    inner = client.connection.inner
    send = inner.send_receive

    def counted(url, headers, body):
        sent.append(url)
        if before is not None:
            before(sent)
        return send(url, headers, body)

    inner.send_receive = counted
    return sent


def test_an_endpoint_that_never_answered_is_given_up_soon_one_that_did_is_retried(
        ots_instance, monkeypatch, fast_retries):
    # A port another test's server answered on earlier in this process would count as known.
    monkeypatch.setattr(retry, "_answered", set())
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]  # closed again: nothing listens there
    credentials = (ots_instance.access_key_id, ots_instance.access_key_secret, ots_instance.instance)
    nobody = retry.install(OTSClient(f"http://127.0.0.1:{port}", *credentials))
    sent = _attempts(nobody)
    with pytest.raises(urllib3.exceptions.HTTPError):
        nobody.list_table()
    assert len(sent) == retry.FIRST_CONTACT_RETRIES + 1  # not the policy's 12 retries

    # Through a relay that answered once, then refuses connections for a while: retried until
    # it is back, by the full policy. It comes back for the attempt after as many refused ones
    # as an endpoint that never answered is given: the client gets there only if it retries on.
    relay = BreakingProxy(ots_instance.endpoint, fraction=0, seed=0)
    relay_port = int(relay.endpoint.rsplit(":", 1)[1])
    back: list[BreakingProxy] = []
    refused = retry.FIRST_CONTACT_RETRIES + 1

    def bring_back(sent: list[str]) -> None:
        if len(sent) == 1 + refused + 1 and not back:
            back.append(BreakingProxy(ots_instance.endpoint, fraction=0, seed=0,
                                      listen_port=relay_port))

    client = retry.install(OTSClient(relay.endpoint, *credentials))
    sent = _attempts(client, bring_back)
    assert client.list_table() is not None
    relay.close()
    try:
        client.connection.inner.pool.clear()  # no kept-alive connection: new ones are refused
        assert client.list_table() is not None
        assert len(sent) > 1 + retry.FIRST_CONTACT_RETRIES + 1
        assert back, "the relay was never brought back"
    finally:
        for proxy in back:
            proxy.close()
