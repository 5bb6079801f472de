"""Prefix-cache hits per engine over a load (canary/checks/throughput/prefixcache.py): the counters read
from a /metrics exposition, their growth (a reset, an absent counter, nothing queried), and engines
that cannot be scraped. The expositions are written by prometheus_client, the library vLLM exports
with, with the metric and label names vLLM 0.32 defines (vllm/v1/metrics/loggers.py)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, generate_latest

from canary.checks.throughput import prefixcache as pc
from canary.core import metric_keys as k
from canary.core.ports import free_ports
from canary.core.promtext import parse


class Engine:
    """One engine process's counters in a prometheus_client registry (the library vLLM exports with), with
    vLLM's metric and label names; `scrape` is its /metrics as the check parses it. A restarted engine
    is a new Engine (new counters, new _created times)."""

    def __init__(self, names: tuple[str, ...] = (*pc.LOCAL, *pc.EXTERNAL), engines: int = 1) -> None:
        self.registry = CollectorRegistry()
        self.engines = engines
        self.counters = {
            name: Counter(name, "doc", ["engine", "model_name"], registry=self.registry)
            for name in (*names, "vllm:prompt_tokens")  # an unrelated counter beside them
        }
        for counter in self.counters.values():
            for engine in range(engines):
                counter.labels(str(engine), "tiny")  # vLLM creates every series at 0

    def inc(self, queries: float, hits: float, ext_queries: float = 0.0, ext_hits: float = 0.0) -> Engine:
        values = dict(zip((*pc.LOCAL, *pc.EXTERNAL), (queries, hits, ext_queries, ext_hits), strict=True))
        for name, value in values.items():
            if name in self.counters:
                for engine in range(self.engines):
                    self.counters[name].labels(str(engine), "tiny").inc(value)
        return self

    def scrape(self) -> pc.Scrape:
        return pc.read(parse(generate_latest(self.registry).decode()))


def test_counters_are_read_as_vllm_exposes_them() -> None:
    scrape = Engine(names=pc.LOCAL, engines=2).inc(288.0, 256.0).scrape()
    queries, hits = scrape[pc.LOCAL[0]], scrape[pc.LOCAL[1]]
    assert queries is not None and queries.value == 576.0  # _total, summed over the engine label
    assert hits is not None and hits.value == 512.0
    assert queries.created is not None  # prometheus_client's _created series
    assert scrape[pc.EXTERNAL[0]] is None and scrape[pc.EXTERNAL[1]] is None  # not exported: absent


def test_growth_over_the_load_and_its_hit_rate() -> None:
    engine = Engine().inc(1000.0, 200.0, 50.0, 0.0)
    before = engine.scrape()
    after = engine.inc(12672.0, 10240.0, 2432.0, 2432.0).scrape()
    local = pc.growth(before, after, pc.LOCAL)
    assert (local.queried, local.hits, local.reset) == (12672.0, 10240.0, False)
    assert local.hit_rate is not None and round(local.hit_rate, 4) == 0.8081
    external = pc.growth(before, after, pc.EXTERNAL)
    assert (external.queried, external.hits, external.hit_rate) == (2432.0, 2432.0, 1.0)


def test_a_restarted_engine_counts_since_the_restart() -> None:
    before = Engine().inc(5000.0, 4000.0).scrape()
    after = Engine().inc(300.0, 100.0).scrape()  # a new process: lower counters, new _created
    grown = pc.growth(before, after, pc.LOCAL)
    assert grown.reset and (grown.queried, grown.hits) == (300.0, 100.0)  # never a negative growth
    assert grown.to_json()["reset"] is True


def test_a_counter_that_went_down_was_reset_also_without_created_times() -> None:
    q, h = pc.LOCAL
    before = {q: pc.Counter(5000.0), h: pc.Counter(4000.0)}
    after = {q: pc.Counter(300.0), h: pc.Counter(4100.0)}  # only one went down: both count since the restart
    assert pc.growth(before, after, pc.LOCAL) == pc.Growth(present=True, queried=300.0, hits=4100.0, reset=True)


def test_a_new_created_time_is_a_reset_even_when_the_counter_grew_past_its_old_value() -> None:
    q, h = pc.LOCAL
    before = {q: pc.Counter(100.0, created=1000.0), h: pc.Counter(50.0, created=1000.0)}
    after = {q: pc.Counter(900.0, created=2000.0), h: pc.Counter(450.0, created=2000.0)}
    grown = pc.growth(before, after, pc.LOCAL)
    assert grown.reset and (grown.queried, grown.hits) == (900.0, 450.0)  # not 800 / 400
    same = {q: pc.Counter(900.0, created=1000.0), h: pc.Counter(450.0, created=1000.0)}
    assert pc.growth(before, same, pc.LOCAL) == pc.Growth(present=True, queried=800.0, hits=400.0)


def test_nothing_queried_has_no_hit_rate() -> None:
    engine = Engine().inc(64.0, 0.0)
    grown = pc.growth(engine.scrape(), engine.scrape(), pc.LOCAL)
    assert grown.present and grown.queried == 0.0 and not grown.reset and grown.hit_rate is None
    assert grown.to_json()["hit_rate"] is None
    engines = [pc.EngineHits("prefill", grown, pc.Growth(False))]
    assert pc.metrics(engines) == {
        k.prefix_cache_key("queried_tokens", "prefill"): 0.0,
        k.prefix_cache_key("hit_tokens", "prefill"): 0.0,
    }  # no rate: not a 0% (or 100%) hit rate


def test_an_image_without_the_counters_records_their_absence_and_no_number() -> None:
    plain = Engine(names=()).inc(10.0, 5.0).scrape()  # only vllm:prompt_tokens
    grown = pc.growth(plain, plain, pc.LOCAL)
    assert grown == pc.Growth(present=False) and grown.hit_rate is None
    assert grown.to_json() == {"present": False}
    # present before, gone after (another image behind the same URL): absent, not a growth
    assert not pc.growth(Engine().inc(10.0, 5.0).scrape(), plain, pc.LOCAL).present
    engines = pc.compare({"aggregated": plain}, {"aggregated": plain})
    assert pc.metrics(engines) == {}
    assert pc.evidence(engines)["engines"]["aggregated"] == {
        "local": {"present": False},
        "external": {"present": False},
    }


def test_engines_that_cannot_be_scraped_are_named_with_the_reason() -> None:
    (port,) = free_ports(1)  # nothing listens there
    url = f"http://127.0.0.1:{port}/metrics"
    found = pc.snapshot({"prefill": url, "decode": None}, timeout_s=2.0)
    assert isinstance(found["prefill"], str) and url in found["prefill"]
    assert found["decode"] == "no /metrics URL"
    engines = pc.compare(found, found)
    assert [e.error for e in engines] == [found["prefill"], "no /metrics URL"]
    assert pc.metrics(engines) == {}
    # scraped after the load but not before: an error, not a growth since the process started
    late = pc.compare({}, {"decode": Engine().inc(500.0, 256.0).scrape()})
    assert late[0].error == "not scraped before the load" and not late[0].local.present


def test_an_answer_that_is_not_an_exposition_is_named_not_raised() -> None:
    class Garbage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"vllm:prefix_cache_queries_total{engine=0 twelve\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        found = pc.snapshot({"aggregated": url}, timeout_s=5.0)
    finally:
        server.shutdown()
        server.server_close()
    assert isinstance(found["aggregated"], str) and found["aggregated"].startswith(f"cannot parse {url}")


def test_metrics_per_role_feed_the_exported_hit_ratio() -> None:
    prefill, decode = Engine(), Engine()
    before = {"prefill": prefill.scrape(), "decode": decode.scrape()}
    after = {
        "prefill": prefill.inc(12800.0, 7936.0, 4864.0, 0.0).scrape(),
        "decode": decode.inc(3200.0, 0.0, 3200.0, 3200.0).scrape(),
    }
    numbers = pc.metrics(pc.compare(before, after))
    assert numbers[k.prefix_cache_key(k.PREFIX_CACHE_HIT_RATE, "prefill")] == 0.62
    assert numbers[k.prefix_cache_key(k.PREFIX_CACHE_HIT_RATE, "decode")] == 0.0  # the local cache's, not NIXL's
    assert numbers[k.prefix_cache_key("queried_tokens", "decode")] == 3200.0
