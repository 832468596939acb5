"""emel.memory.from_gguf against llama.cpp's own buffer sizes (issue 34).

tests/data/llamacpp_buffers.json holds the bytes llama.cpp allocated for the
tiny models of bench/tiny_gguf.py on a grid of configurations (written by
bench/llamacpp_ground_truth.py from a llama.cpp build; CI does not build
llama.cpp). The models are written again here, into a temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from emel.memory import PlanError, from_gguf  # noqa: E402
from emel.memory.fit import main as fit_main  # noqa: E402
from emel.memory.gguf import fit as gguf_fit, read_model  # noqa: E402
from tiny_gguf import LARGE_MODELS, TINY_MODELS, model_info, write_tiny_gguf  # noqa: E402

TABLE = json.loads((Path(__file__).parent / "data" / "llamacpp_buffers.json").read_text())
ROWS = TABLE["rows"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    return {name: write_tiny_gguf(folder / f"{name}.gguf", **spec) for name, spec in TINY_MODELS.items()}


def _kwargs(row):
    return dict(n_ctx=row["n_ctx"], n_batch=row["n_batch"], n_ubatch=row["n_ubatch"], n_seq=row["n_seq"],
                kv_unified=row["kv_unified"], flash_attn=row["flash_attn"], kv_type=row["type_k"],
                type_v=row["type_v"])


def test_table_covers_the_grid():
    # the models the table was measured on are the ones written (or described) here
    assert TABLE["models"] == TINY_MODELS and TABLE["large_models"] == LARGE_MODELS
    assert TABLE["llama_cpp"]["commit"]
    assert len(ROWS) == 496
    archs = {**TINY_MODELS, **LARGE_MODELS}
    assert {archs[r["model"]]["arch"] for r in ROWS} == {"llama", "qwen2", "qwen3", "gemma", "phi3"}
    assert {(r["n_seq"], r["kv_unified"]) for r in ROWS} == {(1, False), (2, False), (4, False), (2, True),
                                                             (4, True)}
    assert {r["model"] for r in ROWS} == set(archs)
    assert {(r["flash_attn"], r["type_k"], r["type_v"]) for r in ROWS} == {
        (False, "f16", "f16"), (True, "f16", "f16"), (True, "q8_0", "q8_0"), (False, "q8_0", "f16"),
        (True, "q4_0", "q4_0"), (True, "q5_1", "iq4_nl"), (True, "bf16", "bf16"), (False, "f32", "f32"),
        (False, "q4_1", "f16")}
    assert sum(bool(r.get("refused")) for r in ROWS) == 11


def test_every_configuration_equals_llama_cpp(models):
    """Model, KV, output and compute bytes and the graph's node count, all equal; what
    llama.cpp refuses is a PlanError."""
    wrong = []
    infos = {name: read_model(path) for name, path in models.items()}  # each file read once
    # the wide models (tens of MB) are described, not written: model_info is what read_model reads
    infos.update({name: model_info(name, **spec) for name, spec in LARGE_MODELS.items()})
    for row in ROWS:
        if row.get("refused"):
            with pytest.raises(PlanError, match="flash attention"):
                from_gguf(infos[row["model"]], auto=False, **_kwargs(row))
            continue
        p = from_gguf(infos[row["model"]], auto=False, **_kwargs(row))
        got = (p.model_bytes, p.kv_bytes, p.output_bytes, p.compute_bytes, p.graph_nodes,
               p.n_ctx, p.n_batch, p.n_ubatch)
        want = (row["model_bytes"], row["kv_bytes"], row["output_bytes"], row["compute_bytes"],
                row["graph_nodes"], row["llama_n_ctx"], row["llama_n_batch"], row["llama_n_ubatch"])
        if got != want:
            wrong.append((row["model"], _kwargs(row), got, want))
    assert wrong == []


def test_model_info_is_what_the_reader_reads(models):
    """model_info (the wide models' description) agrees with read_model on every written model."""
    for name, spec in TINY_MODELS.items():
        read, described = read_model(models[name]), model_info(str(models[name]), **spec)
        assert [(t.name, t.type, t.ne, t.nbytes) for t in read.tensors.values()] == \
            [(t.name, t.type, t.ne, t.nbytes) for t in described.tensors.values()]
        for key in ("arch", "n_ctx_train", "n_embd", "n_layer", "n_ff", "n_head", "n_head_kv",
                    "head_dim_k", "head_dim_v", "n_vocab"):
            assert getattr(read, key) == getattr(described, key), (name, key)


def test_issue_example_and_auto_placement(models):
    """n_ctx 4096, ubatch 512: 40.76 MiB without flash attention in llama.cpp's log; emel's auto
    placement of the same graphs needs less."""
    off = from_gguf(models["llama-gqa"], n_ctx=4096, n_ubatch=512, flash_attn=False)
    on = from_gguf(models["llama-gqa"], n_ctx=4096, n_ubatch=512, flash_attn=True)
    assert off.compute_bytes == 42_739_712 and f"{off.compute_bytes / 2**20:.2f}" == "40.76"
    assert on.compute_bytes == 5_715_968
    assert off.compute_bytes_auto == 42_475_520 and on.compute_bytes_auto == 5_451_776
    assert off.total_bytes == 239_616 + 1_048_576 + 1_036 + 42_739_712
    text = str(off)
    assert "42,739,712 B" in text and "264,192 B less than ggml-alloc" in text
    assert json.loads(json.dumps(off.to_dict()))["total_bytes"] == off.total_bytes


def test_defaults_follow_llama_cpp(models):
    """n_ctx 0 is the trained context; n_ctx is padded to 256; auto flash attention is on."""
    p = from_gguf(models["llama-mha-tied"], auto=False)
    assert (p.n_ctx, p.n_batch, p.n_ubatch, p.flash_attn) == (4096, 2048, 512, True)
    assert from_gguf(models["llama-gqa"], n_ctx=1000, auto=False).n_ctx == 1024


def test_without_the_gguf_package(models, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "gguf", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'emel\[gguf\]'"):
        from_gguf(models["llama-gqa"])


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello, not a model\n")
    with pytest.raises(PlanError, match=r"notes\.gguf: not a GGUF file.*convert_hf_to_gguf"):
        from_gguf(bad)
    with pytest.raises(PlanError, match=r"missing\.gguf: no such file"):
        from_gguf(tmp_path / "missing.gguf")


@pytest.mark.parametrize("keep", [10, 2000, 200_000])
def test_truncated_file(models, tmp_path, keep):
    """Cut in the header, in the tensor table, in the data: a PlanError saying to download again."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(models["llama-gqa"].read_bytes()[:keep])
    with pytest.raises(PlanError, match=r"cut\.gguf: .*(truncated|damaged).*download it again"):
        from_gguf(cut)


def test_missing_layer_weight(models, tmp_path):
    """A tensor the architecture's graph needs, renamed away: refused naming it (not an AttributeError)."""
    data = models["llama-gqa"].read_bytes()
    name = b"blk.1.attn_k.weight"
    assert data.count(name) == 1
    bad = tmp_path / "renamed.gguf"
    bad.write_bytes(data.replace(name, b"blk.1.attn_k.weighX"))
    with pytest.raises(PlanError, match=r"renamed\.gguf: no tensor 'blk\.1\.attn_k\.weight', which the "
                                        r"llama graph needs") as e:
        from_gguf(bad)
    assert (e.value.code, e.value.tensor) == ("INVALID_IR_SHAPES", "blk.1.attn_k.weight")


def test_weight_of_the_wrong_shape(models, tmp_path):
    """ffn_down stored transposed (same bytes): the product that uses it cannot be formed, as
    ggml_can_mul_mat would assert; refused naming the weight."""
    import struct
    spec = TINY_MODELS["llama-gqa"]
    data = bytearray(models["llama-gqa"].read_bytes())
    name = b"blk.0.ffn_down.weight"
    at = data.index(name) + len(name)
    n_dims, ne0, ne1 = struct.unpack_from("<IQQ", data, at)
    assert (n_dims, ne0, ne1) == (2, spec["n_ff"], spec["n_embd"])
    struct.pack_into("<IQQ", data, at, 2, ne1, ne0)
    bad = tmp_path / "transposed.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(PlanError, match=r"a matrix product whose shapes do not match: "
                                        r"blk\.0\.ffn_down\.weight \[64, 160, 1, 1\]") as e:
        from_gguf(bad)
    assert (e.value.code, e.value.tensor) == ("INVALID_IR_SHAPES", "blk.0.ffn_down.weight")


def test_damaged_array_length_is_refused_at_once(models, tmp_path):
    """The vocabulary's length with a high bit set (a fuzzed input kept the `gguf` reader busy
    for minutes walking it): refused before the reader sees it, naming the count."""
    import struct
    import time
    data = bytearray(models["llama-gqa"].read_bytes())
    key = b"tokenizer.ggml.tokens"
    at = data.index(key) + len(key)
    assert struct.unpack_from("<IIQ", data, at) == (9, 8, 259)  # an array of 259 strings
    struct.pack_into("<Q", data, at + 8, 259 | 1 << 40)
    bad = tmp_path / "vocab.gguf"
    bad.write_bytes(bytes(data))
    start = time.perf_counter()
    with pytest.raises(PlanError, match=r"vocab\.gguf: cannot read the GGUF header.*key [0-9]+ \('tokenizer\.ggml\.tokens'\) of "
                                        r"1,099,511,628,035 items at byte [0-9,]+: more than the [0-9,]+ "
                                        r"bytes left.*download it again"):
        from_gguf(bad)
    assert time.perf_counter() - start < 5  # minutes before the check


def test_unmodelled_architecture(tmp_path):
    path = write_tiny_gguf(tmp_path / "g2.gguf", arch="gemma2")
    with pytest.raises(PlanError, match=r"g2\.gguf: architecture 'gemma2' is not modelled yet "
                                        r"\(modelled: llama, qwen2, qwen3, gemma, phi3\)"):
        from_gguf(path)


def test_context_above_trained_length(models):
    with pytest.raises(PlanError, match=r"llama-mha-tied\.gguf: n_ctx=8192 is above the model's "
                                        r"trained context \(4096\); use n_ctx <= 4096") as e:
        from_gguf(models["llama-mha-tied"], n_ctx=8192)
    assert e.value.code == "SHAPE_ENVELOPE_EXCEEDED"
    assert from_gguf(models["llama-mha-tied"], n_ctx=8192, allow_long_context=True,
                     auto=False).kv_bytes == 3 * 2 * 128 * 8192 * 2


def test_bad_configuration(models):
    m = models["llama-gqa"]
    with pytest.raises(PlanError, match="quantized V cache .* needs flash attention"):
        from_gguf(m, flash_attn=False, kv_type="q8_0")
    with pytest.raises(PlanError, match="kv_type='q3_k' is not a KV cache type"):
        from_gguf(m, kv_type="q3_k")
    with pytest.raises(PlanError, match="n_seq=300 is above llama.cpp's limit of 256"):
        from_gguf(m, n_seq=300)
    with pytest.raises(PlanError, match="n_ubatch must be an integer >= 1"):
        from_gguf(m, n_ubatch=0)


def test_emel_fit_context(models, capsys):
    """The largest context in 20 MiB, proven by the predictions at it and at the next step
    (llama.cpp measured the same: 19,146,752 B compute at 1792, 21,768,192 B at 2048)."""
    m = models["llama-gqa"]
    code = fit_main([str(m), "--budget", "20MiB", "--dim", "ctx", "--flash-attn", "off"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("largest ctx that fits in 20.0 MiB = 20,971,520 B: 1792 ")
    assert "19,146,752 B" in out and "21,768,192 B" in out
    answer = gguf_fit.fit_gguf(m, 20 * 2**20, "ctx", flash_attn=False)
    assert (answer.value, answer.next_value) == (1792, 2048)
    assert answer.prediction.total_bytes <= 20 * 2**20 < answer.next_prediction.total_bytes
    assert answer.prediction.compute_bytes_auto < answer.prediction.compute_bytes


def test_emel_fit_ubatch_and_errors(models, capsys, tmp_path):
    m = models["llama-gqa"]
    answer = gguf_fit.fit_gguf(m, 20 * 2**20, "ubatch", n_ctx=4096, flash_attn=False)
    assert (answer.value, answer.next_value) == (235, 236)
    assert answer.prediction.n_ubatch == 235
    assert answer.prediction.total_bytes <= 20 * 2**20 < answer.next_prediction.total_bytes
    # counting the compute buffer as emel's auto placement needs it: a larger ubatch fits
    placed = gguf_fit.fit_gguf(m, 20 * 2**20, "ubatch", n_ctx=4096, flash_attn=False, compute="auto")
    assert (placed.value, placed.next_value) == (237, 238)
    assert placed.prediction.total_with("auto") == 20_950_796 <= 20 * 2**20
    assert placed.next_prediction.total_with("auto") == 21_033_740
    assert "with emel's auto placement of the compute buffer, it needs" in str(placed)
    out_json = tmp_path / "fit.json"
    assert fit_main([str(m), "--budget", "1MiB", "--dim", "ctx", "--json", str(out_json)]) == 1
    assert "nothing fits in 1.0 MiB" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["value"] is None
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUF\x03")
    assert fit_main([str(bad), "--budget", "8GiB", "--dim", "ctx"]) == 1
    assert "x.gguf: cannot read the GGUF header" in capsys.readouterr().err
    assert fit_main([str(m), "--budget", "8GiB", "--dim", "batch"]) == 1
    assert "a GGUF model's dimensions are ctx and ubatch" in capsys.readouterr().err
