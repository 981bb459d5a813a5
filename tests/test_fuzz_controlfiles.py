"""Property: `convnet check` on any mutation of the example control files and bad data files ends
with exit status 0 or the one-line error, never a traceback or a hang.

The corpus and the mutator are those of tools/fuzz_controlfiles.py, which runs 10,000 cases; here a
few hundred, drawn by hypothesis (derandomized, so the suite is repeatable)."""

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import fuzz_controlfiles as fuzz  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGALRM time limit")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fuzz")
    with fuzz.MemoryCap(256):
        yield fuzz.Corpus(workdir)


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_check_of_a_mutated_control_file_is_ok_or_one_clean_line(corpus, rng):
    base, text = fuzz.mutate(rng, corpus)
    outcome, detail = fuzz.check_case(text, corpus.workdir, timeout=20.0)
    assert outcome in ("ok", "clean"), f"{outcome} from {base}:\n{text[:2000]!r}\n{detail[-3000:]}"


def test_the_corpus_holds_every_example_and_bad_files(corpus):
    names = {name for name, _ in corpus.bases}
    assert names == {p.name for p in (fuzz.ROOT / "controlfiles").glob("*.ctl")}
    assert len(corpus.bad) >= 25
    for _, text in corpus.bases:
        assert '"../data/' not in text             # pointed at the small copies


def test_the_harness_tells_a_traceback_and_a_hang(corpus, monkeypatch):
    from convnet.session import Session
    assert fuzz.check_case("MAKE IMAGE 8 8 1 2 10\n", corpus.workdir)[0] == "ok"
    assert fuzz.check_case("MAKE IMAGE 8 8 1 2\n", corpus.workdir)[0] == "clean"

    def broken(self, cmd):
        raise KeyError("a bug")
    monkeypatch.setitem(Session.HANDLERS, "CLEAR", broken)
    assert fuzz.check_case("CLEAR\n", corpus.workdir)[0] == "traceback"

    def chatty(self, cmd):
        print("convnet: error: one")
        print("convnet: error: two")
        raise SystemExit(2)
    monkeypatch.setitem(Session.HANDLERS, "CLEAR", chatty)
    assert fuzz.check_case("CLEAR\n", corpus.workdir)[0] == "unclean"

    def endless(self, cmd):
        while True:
            pass
    monkeypatch.setitem(Session.HANDLERS, "CLEAR", endless)
    assert fuzz.check_case("CLEAR\n", corpus.workdir, timeout=0.5)[0] == "hang"


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@pytest.mark.slow
@given(rng=st.randoms(use_true_random=False))
def test_a_tiny_run_of_a_mutated_control_file_that_checks_is_ok_or_one_clean_line(corpus, rng):
    for _ in range(50):                      # the first mutation that checks
        base, text = fuzz.mutate(rng, corpus)
        if fuzz.check_case(text, corpus.workdir)[0] == "ok":
            break
    else:
        pytest.fail("none of 50 mutated control files checked: nothing was run")
    outcome, detail = fuzz.check_case(text, corpus.workdir, timeout=120.0, run=True)
    assert outcome in ("ok", "clean"), f"{outcome} from {base}:\n{text[:2000]!r}\n{detail[-3000:]}"


def test_tiny_run_text_cuts_training_and_keeps_outputs_in_the_folder():
    text = ('MAXITERS = 1000\nmax iters=5\nANNEAL ITERS = 100000\nSAVE MODEL "/etc/x.cnm"\n'
            'DISPLAY TRAINING IMAGES 1 2 2 "/tmp/a/b.png"\nTRAIN\n')
    assert fuzz.tiny_run_text(text) == ('ANNEAL ITERS = 2\nMAXITERS = 2\n\n\n\nSAVE MODEL "x.cnm"\n'
                                        'DISPLAY TRAINING IMAGES 1 2 2 "b.png"\nTRAIN\n')
