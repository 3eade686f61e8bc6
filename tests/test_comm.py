"""noloco.theory.comm: each formula against a hand calculation, the closed forms against exact
values, the idle-time simulation against the closed forms (fixed seeds, stated number
of standard errors), and `noloco comm`."""

import importlib.util
import itertools
import json
import math

import numpy as np
import pytest

from noloco.cli import main
from noloco.theory import comm, draws
from noloco.quadratic import comm_report
from noloco.quadratic import idle
from noloco.theory.jitter import Hardware, Jitter, barrier_idle_fraction, expected_max, group_first_step_idle_fraction
from noloco.infra.errors import ConfigError

# latency L = 1 s, b = 0.01 s/B per byte sent, r = 0.001 s/B per byte reduced, m = 100 B:
# every term is visible.
NET = comm.Network(latency=1.0, seconds_per_byte=0.01, reduce_seconds_per_byte=0.001)
M = 100.0
SE = 4  # Monte Carlo estimates must lie within 4 standard errors of the closed form


@pytest.mark.parametrize("func, ranks, expected", [
    # 2(p-1) L + 2(p-1)/p m b + (p-1)/p m r = 6 + 1.5 + 0.075
    (comm.ring_allreduce, 4, 7.575),
    # lg p (L + m b + m r) = 3 * 2.1
    (comm.recursive_doubling_allreduce, 8, 6.3),
    # p = 6: p' = 4 costs 2 * 2.1, the fold 2 (L + m b) + m r = 4.1
    (comm.recursive_doubling_allreduce, 6, 8.3),
    # 2 lg p L + 2 (p-1)/p m b + (p-1)/p m r = 6 + 1.75 + 0.0875
    (comm.rabenseifner_allreduce, 8, 7.8375),
    # p = 5: p' = 4 costs 4 + 1.5 + 0.075, plus the fold 4.1
    (comm.rabenseifner_allreduce, 5, 9.675),
    (comm.ring_allreduce, 1, 0.0),
    (comm.rabenseifner_allreduce, 1, 0.0),
    (comm.binary_tree_allreduce, 1, 0.0),
])
def test_allreduce_hand_calculation(func, ranks, expected):
    assert func(NET, M, ranks) == pytest.approx(expected, rel=1e-12)


def test_trees_hand_calculation():
    # p = 8: depth 3, two children. One segment: reduce = 3 levels x 2 messages x
    # (L + m b + m r) = 12.6, broadcast = 3 x 2 x (L + m b) = 12.
    assert comm.binary_tree_allreduce(NET, M, 8, segments=1) == pytest.approx(24.6)
    # Two trees of 50 B each: 3 x [2 (1 + 0.5 + 0.05) + 2 (1 + 0.5)] = 18.3.
    assert comm.double_binary_tree_allreduce(NET, M, 8, segments=1) == pytest.approx(18.3)
    # Two segments of 50 B: (D + k - 1) = 4 stages of 2 (1 + 0.55) + 2 (1 + 0.5) = 6.1.
    assert comm.binary_tree_allreduce(NET, M, 8, segments=2) == pytest.approx(24.4)
    # p = 2: one child; reduce L + m (b + r), broadcast L + m b.
    assert comm.binary_tree_allreduce(NET, M, 2) == pytest.approx(4.1)


@pytest.mark.parametrize("func", [comm.binary_tree_allreduce, comm.double_binary_tree_allreduce])
@pytest.mark.parametrize("ranks, nbytes", [(8, 100.0), (1024, 1e6), (1000, 3e4), (3, 5e5)])
def test_tree_segments_are_optimal(func, ranks, nbytes):
    net = comm.Network(0.01, 1e-6, 1e-7)
    brute = min(func(net, nbytes, ranks, segments=k) for k in range(1, 3000))
    assert func(net, nbytes, ranks) == pytest.approx(brute, rel=1e-12)


def test_group_exchange_hand_calculation():
    # Pair, root-mediated: member sends phi and Delta (2 messages of 2 s), the root sums
    # 2 x 100 B (0.2 s) and sends both means back (2 x 2 s): 8.2 s.
    assert comm.root_group_exchange(NET, M, 2) == pytest.approx(8.2)
    assert comm.root_group_exchange(NET, M, 4) == pytest.approx(3 * 8.2)
    # Direct: n - 1 swaps of one message, each summed: (n - 1) x 2.1.
    assert comm.direct_group_exchange(NET, M, 2) == pytest.approx(2.1)
    assert comm.direct_group_exchange(NET, M, 4) == pytest.approx(6.3)


def test_latency_bound_speedup_is_log2_n():
    net = comm.Network(0.05, 0.0)
    for N in (16, 256, 1024):
        cost = comm.sync_cost(net, 1e6, N, 2)
        assert cost.speedup_vs_tree == pytest.approx(math.log2(N))
        # Recursive doubling needs lg N messages, the reference exchange 4.
        assert cost.allreduce_seconds["recursive_doubling"] / cost.group_exchange_seconds == pytest.approx(
            math.log2(N) / 4)
    assert comm.sync_cost(net, 1e6, 1024, 2, "direct").speedup_vs_tree == pytest.approx(40)


def test_bandwidth_bound_speedup_vs_tree_is_one_half():
    # L = 0: a pipelined double tree moves 2 m b, the reference pair exchange 4 m b.
    cost = comm.sync_cost(comm.Network(0.0, 1e-9), 1e9, 1024, 2)
    assert cost.speedup_vs_tree == pytest.approx(0.5, rel=1e-3)
    assert cost.speedup_vs_ring == pytest.approx(0.5 * 1023 / 1024)


def test_payload_at_speedup():
    m = comm.payload_at_speedup(comm.INTERNET, 1024, 5.0)
    assert comm.sync_cost(comm.INTERNET, m, 1024).speedup_vs_tree == pytest.approx(5.0, rel=1e-5)
    assert comm.sync_cost(comm.INTERNET, m / 10, 1024).speedup_vs_tree > 5.0
    assert comm.payload_at_speedup(comm.INTERNET, 1024, 100.0) is None


@pytest.mark.parametrize("make, field", [
    (lambda: comm.Network(-1.0, 0.0), "latency"),
    (lambda: comm.Network(0.0, float("nan")), "seconds_per_byte"),
    (lambda: comm.Network.from_bandwidth(0.05, 0.0), "bandwidth"),
    (lambda: comm.ring_allreduce(NET, M, 0), "replicas"),
    (lambda: comm.ring_allreduce(NET, -1.0, 4), "payload_bytes"),
    (lambda: comm.sync_cost(NET, M, 1024, 3), "group_size"),
    (lambda: comm.binary_tree_allreduce(NET, M, 8, segments=0), "segments"),
    (lambda: comm.group_exchange(NET, M, 2, "ring"), "exchange"),
    (lambda: Jitter("weibull"), "jitter"),
    (lambda: Jitter(cv=-0.1), "jitter_cv"),
    (lambda: Hardware(((0.5, 1.0), (0.4, 2.0))), "hardware"),
    (lambda: Hardware(((1.0, 0.0),)), "slowdown"),
])
def test_bad_input_names_the_field(make, field):
    with pytest.raises(ConfigError, match=field):
        make()


def test_hardware_parse():
    assert Hardware.parse("0.75:1,0.25:1.5").classes == ((0.75, 1.0), (0.25, 1.5))
    for bad in ("0.5:1,0.4", "a:b", "", "1:1:1"):
        with pytest.raises(ConfigError, match="hardware"):
            Hardware.parse(bad)


def test_report_is_the_model():
    """`noloco comm`'s report is the model's numbers, not a copy of them."""
    r = comm_report.report(replicas=64, params=1e7, steps=20, trials=2, hardware="0.5:1,0.5:2")
    cost = comm.sync_cost(comm.INTERNET, 2e7, 64)
    assert r.allreduce_seconds == cost.allreduce_seconds
    assert r.speedup_vs_tree == cost.speedup_vs_tree and r.inputs.payload_bytes == 2e7
    assert r.inputs.algorithm == min(cost.allreduce_seconds, key=cost.allreduce_seconds.get)
    assert r.idle.noloco_first_step_closed_form is None       # no closed form for mixed hardware
    assert comm_report.CommReport.from_json(r.to_json()).to_json() == r.to_json()  # the JSON round-trips
    with pytest.raises(ConfigError, match="algorithm"):
        comm_report.report(algorithm="gossip")


@pytest.mark.parametrize("make", [
    lambda: idle.simulate_idle(8, 2, hardware=Hardware(((1.0, 1e100),)), steps=4, trials=2),
    lambda: idle.simulate_idle(8, 2, hardware=Hardware(((0.5, 1.0), (0.5, 1e-7))), steps=4, trials=2),
    lambda: idle.simulate_idle(8, 2, barrier_sync=float("inf"), steps=4, trials=2),
    lambda: idle.simulate_idle(8, 2, group_sync=1e13, steps=4, trials=2),
    lambda: comm_report.report(replicas=8, steps=4, trials=2, hardware="1:1e308"),
    lambda: comm_report.report(replicas=8, steps=4, trials=2, compute_seconds=1e-320),
], ids=["slowdown 1e100", "slowdown 1e-7", "barrier sync inf", "group sync 1e13", "report slowdown 1e308",
        "report compute 1e-320"])
def test_inputs_that_overflow_the_idle_simulation_are_bad_input(make):
    """Issue 34: a slowdown of 1e308 was an internal error (the closed form's integral), 1e100 or a compute time
    of 1e-320 NaN idle fractions; the simulation's own limits, checked before any work."""
    with pytest.raises(ConfigError, match="slowdown|sync|compute"):
        make()


def test_the_first_step_closed_form_counts_a_single_class_slowdown():
    """With one hardware class of slowdown s the compute time per step is s times --compute-seconds (before
    issue 34 the first step's closed form left s out: 0.061 at s = 1e-6, where the simulation gave 1.0)."""
    r = comm_report.report(replicas=8, steps=20, trials=2, hardware="1:2")
    cost = comm.sync_cost(comm.INTERNET, 2e6, 8)
    assert r.idle.noloco_first_step_closed_form == pytest.approx(
        group_first_step_idle_fraction(Jitter(), 2, cost.group_exchange_seconds, 60.0))


# ---------------------------------------------------------------- closed forms

@pytest.mark.parametrize("N", [1, 2, 10, 1000])
def test_expected_max_exponential_is_harmonic_number(N):
    # gamma with cv 1 is Exp(1): E[max of N] = H_N.
    assert expected_max(Jitter("gamma", 1.0), [1.0], [N]) == pytest.approx(
        sum(1 / k for k in range(1, N + 1)), rel=1e-7)
    assert expected_max(Jitter("gamma", 1.0), [3.0], [N]) == pytest.approx(
        3 * sum(1 / k for k in range(1, N + 1)), rel=1e-7)


def test_expected_max_two_lognormals():
    # E[max(X1, X2)] = 2 E[X] Phi(sigma / sqrt 2) for iid lognormal with mean E[X] = 1.
    from scipy.stats import norm  # here, not at the top: collecting the tests should not import scipy.stats

    jitter = Jitter("lognormal", 0.3)
    sigma = math.sqrt(math.log1p(0.3 ** 2))
    assert expected_max(jitter, [1.0], [2]) == pytest.approx(2 * norm.cdf(sigma / math.sqrt(2)), rel=1e-8)


def test_expected_max_mixed_classes():
    # max of Exp(mean a) and Exp(mean b): a + b - ab / (a + b).
    a, b = 1.0, 2.5
    assert expected_max(Jitter("gamma", 1.0), [a, b], [1, 1]) == pytest.approx(a + b - a * b / (a + b))
    assert expected_max(Jitter("gamma", 0.0), [a, b], [1, 1]) == b


def test_hardware_counts():
    hw = Hardware(((0.75, 1.0), (0.25, 1.5)))
    assert hw.counts(10).tolist() == [7, 3] or hw.counts(10).tolist() == [8, 2]
    assert hw.counts(10).sum() == 10
    assert hw.slowdowns(8).tolist() == [1.0] * 6 + [1.5] * 2


# ---------------------------------------------------------------- simulation vs closed form

HAS_NUMBA = importlib.util.find_spec("numba") is not None


@pytest.fixture(params=["numpy", "compiled"])
def idle_path(request, monkeypatch):
    """Each idle-simulation test below runs on both paths: numpy, and the compiled step."""
    if request.param == "compiled" and not HAS_NUMBA:
        pytest.skip("numba is not installed (the fast extra)")
    monkeypatch.setenv("NOLOCO_JIT", "1" if request.param == "compiled" else "0")
    return request.param


@pytest.mark.parametrize("jitter, hardware", [
    (Jitter("lognormal", 0.2), Hardware()),
    (Jitter("gamma", 0.5), Hardware(((0.75, 1.0), (0.25, 1.3)))),
])
def test_barrier_simulation_matches_closed_form(jitter, hardware, idle_path):
    N = 64
    sim = idle.simulate_idle(N, 2, jitter, hardware, steps=100, trials=40, seed=1)
    slow = [s for _, s in hardware.classes]
    exact = expected_max(jitter, slow, hardware.counts(N))
    assert abs(sim.barrier_step - exact) < SE * sim.barrier_step_se
    assert sim.barrier_idle_fraction == pytest.approx(barrier_idle_fraction(jitter, N, hardware), abs=0.01)


@pytest.mark.parametrize("cv", [0.1, 0.5, 2.0])
def test_gamma_compute_times_from_the_fast_sampler_match_closed_forms(cv, idle_path):
    """Above FAST_NORMAL_MIN replicas the gamma compute times come from draws.fast_gamma (shape
    100, 4 and 0.25: the last boosted): the barrier's mean maximum of N and the first step's mean
    maximum of a pair against the closed forms."""
    N = 2 * draws.FAST_NORMAL_MIN
    jitter = Jitter("gamma", cv)
    sim = idle.simulate_idle(N, 2, jitter, steps=40, trials=4, seed=5)
    assert abs(sim.barrier_step - expected_max(jitter, [1.0], [N])) < SE * sim.barrier_step_se
    assert abs(sim.noloco_first_step - expected_max(jitter, [1.0], [2])) < SE * sim.noloco_first_step_se


def test_noloco_first_step_matches_closed_form_and_later_steps_idle_more(idle_path):
    jitter = Jitter("lognormal", 0.2)
    sim = idle.simulate_idle(64, 2, jitter, steps=100, trials=40, seed=2)
    assert abs(sim.noloco_first_step - expected_max(jitter, [1.0], [2])) < SE * sim.noloco_first_step_se
    # Delays propagate through the chain of groups: the long-run step is longer than
    # the first, and shorter than the barrier's (each by many standard errors).
    assert sim.noloco_step - sim.noloco_first_step > 10 * math.hypot(sim.noloco_step_se, sim.noloco_first_step_se)
    assert sim.barrier_step - sim.noloco_step > 10 * math.hypot(sim.barrier_step_se, sim.noloco_step_se)
    assert 1 - 1 / expected_max(jitter, [1.0], [2]) == pytest.approx(
        group_first_step_idle_fraction(jitter, 2))


def test_group_of_everyone_is_the_barrier(idle_path):
    sim = idle.simulate_idle(16, 16, Jitter("gamma", 0.3), steps=30, trials=3, burn_in=0, seed=3)
    assert sim.noloco_step == pytest.approx(sim.barrier_step, rel=1e-12)


def test_sync_time_enters_the_closed_form(idle_path):
    jitter = Jitter("lognormal", 0.1)
    emax = expected_max(jitter, [1.0], [8])
    assert barrier_idle_fraction(jitter, 8, sync_seconds=5.0, compute_seconds=10.0) == pytest.approx(
        1 - 10 / (10 * emax + 5))
    sim = idle.simulate_idle(8, 8, jitter, steps=50, trials=4, barrier_sync=0.5, group_sync=0.5, burn_in=0)
    assert sim.noloco_step == pytest.approx(sim.barrier_step)


def test_barrier_and_first_step_standard_errors_hold_with_two_trials(idle_path):
    """With 2 trials, an SE over the trials has one degree of freedom: |z| > 3 one time in five.
    The barrier's and the first step's SEs come from every step and group (iid), so over 40 seeds
    |z| > 3 should be about as rare as for a normal (0.3 %): at most 2 times."""
    jitter = Jitter("lognormal", 0.2)
    barrier_max, first_max = expected_max(jitter, [1.0], [64]), expected_max(jitter, [1.0], [2])
    big = {"barrier": 0, "first": 0}
    for seed in range(40):
        sim = idle.simulate_idle(64, 2, jitter, steps=30, trials=2, seed=seed)
        big["barrier"] += abs(sim.barrier_step - barrier_max) > 3 * sim.barrier_step_se
        big["first"] += abs(sim.noloco_first_step - first_max) > 3 * sim.noloco_first_step_se
    assert big["barrier"] <= 2 and big["first"] <= 2, big


def test_idle_paths_say_which_ran(idle_path):
    assert idle.simulate_idle(16, 2, steps=4, trials=2).compiled == (idle_path == "compiled")


@pytest.mark.parametrize("n, slow", [(2, (1.0,)), (4, (1.0,)), (2, (1.0, 1.3)), (4, (1.0, 1.3))])
def test_compiled_and_numpy_paths_agree_in_distribution(n, slow, monkeypatch):
    """Other random numbers, the same law: every statistic within SE standard errors, over enough
    replicas (16384) that the compiled shuffle scatters into several piles."""
    if not HAS_NUMBA:
        pytest.skip("numba is not installed (the fast extra)")
    assert idle.pile_bits(16384) == 2
    hardware = Hardware(tuple((1 / len(slow), s) for s in slow))
    runs = []
    for setting in ("0", "1"):
        monkeypatch.setenv("NOLOCO_JIT", setting)
        runs.append(idle.simulate_idle(16384, n, Jitter("lognormal", 0.2), hardware, steps=30, trials=30,
                                       group_sync=0.05, seed=7))
    numpy_run, compiled_run = runs
    assert compiled_run.compiled and not numpy_run.compiled
    for field in ("barrier_step", "noloco_step", "noloco_first_step"):
        a, b = getattr(numpy_run, field), getattr(compiled_run, field)
        se = math.hypot(getattr(numpy_run, field + "_se"), getattr(compiled_run, field + "_se"))
        assert abs(a - b) < SE * se, (field, a, b, se)


def _compiled_order(labels, bits, seed):
    """The compiled step's shuffle of records labelled ``labels`` (groups of one, no compute time):
    the labels in the order the step leaves them."""
    size = len(labels)
    labels = np.asarray(labels, float)
    out, out_slow = np.empty(size), np.empty(size)
    idle._idle_kernel()(np.zeros(size), labels, np.zeros(size, np.float32), False, 1, 0.0, np.uint64(seed), bits,
                        np.empty(size), np.empty(size), np.empty(1 << bits, np.int64), out, out_slow)
    return out_slow


@pytest.mark.parametrize("bits", [0, 1, 2])
def test_compiled_shuffle_is_uniform(bits):
    """All 24 orders of four records equally likely, in one pile or scattered into 2 or 4."""
    if not HAS_NUMBA:
        pytest.skip("numba is not installed (the fast extra)")
    seeds = np.random.default_rng(bits).bit_generator.random_raw(24_000)
    counts = {}
    for seed in seeds:
        order = tuple(_compiled_order([0, 1, 2, 3], bits, seed).astype(int))
        counts[order] = counts.get(order, 0) + 1
    assert sorted(counts) == sorted(itertools.permutations(range(4)))
    chi2 = sum((v - 1000) ** 2 / 1000 for v in counts.values())
    assert chi2 < 60  # 23 degrees of freedom: p < 1e-4 beyond
    big = _compiled_order(np.arange(100_000), idle.pile_bits(100_000), 1)
    assert np.array_equal(np.sort(big), np.arange(100_000))


def test_compiled_groups_pair_a_group_with_itself_one_time_in_three(monkeypatch):
    """Homogeneous hardware, N = 4: two groups of two start at 0 and 1; a fresh pairing puts each
    group with itself (new starts {0, 1}) with probability 1/3, else mixes them ({1, 1})."""
    if not HAS_NUMBA:
        pytest.skip("numba is not installed (the fast extra)")
    step = idle._CompiledStep(np.array([0.0, 1.0]), np.ones(4), homogeneous=True)
    rng = np.random.default_rng(3)
    trials = 9000
    kept = 0
    for _ in range(trials):
        start, *_ = step(rng, np.array([0.0, 1.0]), np.zeros(4, np.float32), n=2, group_sync=0.0, first=False)
        kept += sorted(start) == [0.0, 1.0]
    assert abs(kept / trials - 1 / 3) < SE * math.sqrt(2 / 9 / trials)


# ---------------------------------------------------------------- the command

def _cli(capsys, *argv):
    code = main(["comm", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_acceptance_point(capsys):
    """Internet-like defaults, N = 1024: speed-up vs tree within 20% of log2 N = 10,
    and the exchange is latency-bound."""
    code, out, _ = _cli(capsys, "--replicas", "1024", "--json")
    assert code == 0
    r = json.loads(out)
    for key in ("schema_version", "allreduce_seconds", "group_exchange_seconds", "speedup_vs_tree",
                "speedup_vs_ring", "idle_fraction_barrier", "idle_fraction_noloco"):
        assert key in r
    assert set(r["allreduce_seconds"]) == set(comm.ALLREDUCE)
    assert abs(r["speedup_vs_tree"] - 10) <= 0.2 * 10
    assert r["latency_share"]["group_exchange"] > 0.5
    assert 0 < r["idle_fraction_noloco"] < r["idle_fraction_barrier"] < 1


def test_cli_says_which_path_ran_and_refuses_a_bad_switch(idle_path, monkeypatch, capsys):
    code, out, _ = _cli(capsys, "--replicas", "64", "--steps", "4", "--trials", "2", "--json")
    assert code == 0
    assert json.loads(out)["idle"]["simulation"]["compiled"] == (idle_path == "compiled")
    monkeypatch.setenv("NOLOCO_JIT", "fast")
    code, _, err = _cli(capsys, "--replicas", "64")
    assert code == 2
    assert err.strip().splitlines() == ["noloco comm: error: NOLOCO_JIT='fast' is not allowed; allowed: auto, 1, 0"]


def test_cli_table_and_bandwidth_bound_case(capsys):
    code, out, _ = _cli(capsys, "--replicas", "64", "--params", "1e9", "--steps", "20", "--trials", "2")
    assert code == 0 and "bandwidth-bound" in out and "speed-up vs tree" in out
    code, out, _ = _cli(capsys, "--replicas", "64", "--params", "1e9", "--json", "--steps", "20", "--trials", "2")
    assert json.loads(out)["speedup_vs_tree"] < 1


@pytest.mark.parametrize("argv", [
    ["--latency", "-1"],
    ["--replicas", "1024", "--group-size", "3"],
    ["--replicas", "0"],
    ["--hardware", "0.5:1,0.4"],
    ["--hardware", "0.5:1,0.4:2"],
    ["--jitter-cv", "-0.5"],
    ["--bandwidth", "0"],
    ["--params", "nan"],
])
def test_cli_bad_input_exits_2(capsys, argv):
    code, out, err = _cli(capsys, *argv, "--steps", "5", "--trials", "2")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("noloco comm: error:")


# ---------------------------------------------------------------- the measurement script

def test_measure_two_ranks_tiny_payload(tmp_path):
    pytest.importorskip("torch")
    from noloco.llm_check import comm_measure
    from noloco.infra.files import SCHEMA_VERSION, write_json

    data = comm_measure.measure(ranks=[2], sizes=[1024, 4096], base_repeats=3, progress=False)
    assert data.schema_version == SCHEMA_VERSION
    ops = {(c.op, c.bytes) for c in data.measurements}
    assert ops == {(op, m) for op in ("allreduce", "pair_exchange", "pingpong") for m in (1024, 4096)}
    for c in data.measurements:
        assert len(c.times_s) >= 3 and all(0 < t < 10 for t in c.times_s)
        assert c.p10_s <= c.median_s <= c.p90_s and c.model_s > 0
    out = tmp_path / "sub" / "m.json"
    write_json(out, data)
    assert comm_measure.CommReport.from_json(json.loads(out.read_text())).fit == data.fit
    assert [p.name for p in out.parent.iterdir()] == ["m.json"]
