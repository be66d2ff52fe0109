"""Submitting: a file that cannot be a job is refused up front (exit code 2, nothing
written, nothing queued); bad lines become failed items and the rest is queued."""

import json
import threading

import pytest
import redis
from sqlalchemy import func, select, update
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from dinfer_batch.fastjson import dumps
from dinfer_batch.jobs.intake import ingest
from dinfer_batch.jobs.reading import results
from dinfer_batch.jobs.reading.results import output_texts, outputs
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import ModelInfo, load_model_info
from dinfer_batch.storage.tables import Chunk, Item, Job
from dinfer_engine.loading.tokenizer import load_token_counter, load_tokenizer
from dinfer_models import DEMO as DEMO_MODEL
from dinfer_models import MODELS_DIR
from tests.service_helpers import REDIS_URL, env_settings, write_jsonl

pytestmark = pytest.mark.integration


def counts(service):
    with service.sessions()() as session:
        return tuple(session.scalar(select(func.count()).select_from(t))
                     for t in (Job, Item, Chunk))


def queued_messages(service):
    return redis.Redis.from_url(REDIS_URL).llen(service.queue)


@pytest.mark.parametrize(("lines", "args", "message"), [
    (None, [], "input file not found"),
    ([], [], "has no requests (the file is empty)"),
    ([{"prompt": "a", "custom_id": "x"}, {"prompt": "b", "custom_id": "x"}], [],
     "duplicate custom_id 'x' on lines 1 and 2"),
    ([{"prompt": "a"}], ["--model", "/nonexistent/model"], "unknown model '/nonexistent/model'"),
    ([{"prompt": "a"}], ["--max-tokens", "10", "--block-length", "4", "--steps", "4"],
     "invalid generation options: steps=4 must be a multiple of the number of blocks (3: "
     "max_tokens=10 rounded up to blocks of block_length=4)"),
    ([{"prompt": "a"}], ["--metadata", "novalue"], "--metadata takes KEY=VALUE"),
    ([{"prompt": "a"}], ["--max-tokens", "256", "--block-length", "8"],
     "an answer of 256 tokens leaves no room for a prompt in the model's context of 256"),
])
def test_bad_input_is_refused_before_anything_is_written(sqlite_service, tmp_path, lines, args,
                                                         message):
    path = tmp_path / "in.jsonl"
    if lines is not None:
        write_jsonl(path, lines)
    result = sqlite_service.cli("submit", path, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert counts(sqlite_service) == (0, 0, 0)
    assert queued_messages(sqlite_service) == 0


def test_duplicate_across_insert_batches_leaves_nothing(service, tmp_path, monkeypatch):
    """On both databases: their bulk paths differ (COPY on PostgreSQL)."""
    monkeypatch.setattr(ingest, "INSERT_BATCH", 2)
    path = write_jsonl(tmp_path / "in.jsonl",
                       [{"prompt": "a", "custom_id": f"id{i}"} for i in range(5)]
                       + [{"prompt": "b", "custom_id": "id1"}])
    result = service.cli("submit", path)
    assert result.exit_code == 2, result.output
    assert "duplicate custom_id 'id1' on lines 2 and 6" in result.output
    assert counts(service) == (0, 0, 0)


@pytest.mark.parametrize("normalizer", [None, normalizers.NFKC()])
def test_token_bounds_never_count_fewer_tokens_than_the_tokenizer(tmp_path, normalizer):
    """The cheap bound that spares tokenizing most prompts, on a byte-level BPE with a
    special token around each text; a normaliser (NFKC turns one character into up to 18)
    makes it count exactly."""
    texts = ["", "a", "add 12 30=", "héllo wörld", "\ufdfa" * 3, "🙂 🙂", "x" * 300,
             " spaced   out "]
    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    backend.train_from_iterator(texts * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", backend.token_to_id("<s>"))])
    backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    info = ModelInfo(name="bpe", path=str(tmp_path), max_context=256,
                     tokens=load_token_counter(tmp_path))
    counts = info.token_counts(texts)
    bounds = info.token_bounds(texts)
    assert all(bound >= count for bound, count in zip(bounds, counts, strict=True))
    assert (bounds == counts) == (normalizer is not None)
    assert counts[3] > 3  # the bound was tested on real splits, not one token per text
    # read without transformers, counted as the transformers tokenizer counts
    assert counts == [len(ids) for ids in load_tokenizer(tmp_path)(texts)["input_ids"]]


def test_token_counter_counts_as_transformers_for_a_class_it_loads_through_it(tmp_path):
    """A tokenizer class other than the generic one goes through transformers, which
    configures it beyond tokenizer.json (transformers 4 adds the BOS token here, 5 builds
    the Llama pipeline anew): the count follows transformers, not the file."""
    texts = ["add 12 30=", "<|eos|> inside", "héllo"]
    for name in ("tokenizer.json", "config.json"):
        (tmp_path / name).write_bytes((DEMO_MODEL / name).read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|eos|>",
         "add_bos_token": True, "add_eos_token": False}))
    counter = load_token_counter(tmp_path)
    expected = [len(ids) for ids in load_tokenizer(tmp_path)(texts)["input_ids"]]
    plain = load_token_counter(DEMO_MODEL).counts(texts)
    assert counter.counts(texts) == expected != plain


def test_bad_lines_fail_alone_and_the_rest_is_queued_in_chunks(sqlite_service, tmp_path):
    lines = [{"prompt": f"p{i}", "max_tokens": 8, "block_length": 8} for i in range(5)]
    lines[2] = "{oops"
    lines.append({"prompt": "x" * 300})  # longer than the tiny model's 256-token context
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    result = sqlite_service.cli("submit", path, "--chunk-size", "2", "--json",
                                "--metadata", "team=a")
    assert result.exit_code == 0, result.output
    job = sqlite_service.job(json.loads(result.stdout)["id"])  # stderr: no worker
    assert (job.status, job.total_count, job.failed_count, job.chunk_count) == (
        "in_progress", 6, 2, 2)
    assert job.meta == {"team": "a"}
    assert queued_messages(sqlite_service) == 1  # no live worker: a window of one permit
    with sqlite_service.sessions()() as session:
        failed = dict(session.execute(select(Item.line, Item.error_message)
                                      .where(Item.status == "failed")).all())
    assert failed[3].startswith("line 3: invalid JSON")
    assert failed[6].startswith("line 6: prompt is too long: 300 tokens")


def test_results_of_a_running_job_are_refused(sqlite_service, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}])
    job_id = sqlite_service.cli("submit", path).stdout.strip()
    result = sqlite_service.cli("results", job_id)
    assert result.exit_code == 2 and "still in_progress" in result.output
    assert sqlite_service.cli("status", "batch_nope").exit_code == 2


def test_lines_checked_in_forked_processes_make_the_same_job_and_results(
        service, tmp_path, monkeypatch):
    """On both databases, in batches and pages of a few lines: a file checked by two forked
    processes gives the items checking it here gives (errors, duplicates, chunks), and
    results formatted by two processes are the lines `outputs` gives, in order."""
    url = service.env["DINFER_BATCH_DATABASE_URL"]
    lines = [{"prompt": f"p{i % 5}", "custom_id": f"c{i}"} for i in range(20)]
    lines[3], lines[7] = "{oops", {"prompt": "x" * 300}  # bad JSON; longer than the context
    lines[9] = {"prompt": "sampled", "temperature": 0.7}
    lines[12] = {"messages": [{"role": "user", "content": "hi"}], "seed": 3}
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    path.write_text(path.read_text().replace("\n", "\n\n", 2))  # blank lines count too
    monkeypatch.setattr(ingest, "INSERT_BATCH", 3)
    monkeypatch.setattr(results, "PAGE", 4)
    forks = []
    for module in (ingest, results):
        monkeypatch.setattr(module, "ordered_map", lambda f, items, processes, real=module
                            .ordered_map: forks.append(processes) or real(f, items, processes))
    sessions = service.sessions()
    spec = JobSpec(model=load_model_info(str(service.model), MODELS_DIR), queue=service.queue,
                   chunk_size=4, params={"max_tokens": 8, "block_length": 8})
    jobs = [ingest.ingest(sessions, path, spec, env_settings(), processes=p) for p in (0, 2)]
    assert forks == [0, 2], f"threads left running stop forks: {threading.enumerate()}"

    def rows(job):
        with sessions() as session:
            return [(i.line, i.custom_id, i.chunk_id, i.request, i.status, i.error_message,
                     i.duplicate_of) for i in session.scalars(
                         select(Item).where(Item.job_id == job.id).order_by(Item.line))]

    assert rows(jobs[0]) == rows(jobs[1])
    assert [(j.total_count, j.failed_count, j.deduplicated_count, j.chunk_count)
            for j in jobs] == [(20, 2, 11, 2)] * 2
    with sessions.begin() as session:
        session.execute(update(Item).where(Item.job_id == jobs[1].id, Item.line % 3 == 0,
                                           Item.status == "pending")
                        .values(status="completed", output_text="é", finish_reason="stop",
                                completion_tokens=1, nfe=1, finished_at=1.0))
    job = service.job(jobs[1].id)
    for per_sample in (False, True):
        expected = [dumps(line) + "\n" for line in outputs(sessions, job, per_sample)]
        pages = list(output_texts(url, job, per_sample, split_errors=True, processes=2))
        assert "".join(good for good, _ in pages) == "".join(
            text for text in expected if '"error":null' in text)
        assert "".join(bad for _, bad in pages) == "".join(
            text for text in expected if '"error":null' not in text)
        assert len(pages) == 6 and forks[-1] == 2
