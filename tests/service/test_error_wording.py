"""Errors name what the user sent: the field as spelt (max_tokens, max_completion_tokens,
a Responses line's max_output_tokens), its value and the bound. Booleans are refused
wherever an integer is meant; stop and completion_window are bounded; a nested Responses
input names the part that is wrong."""

import json

import pytest

from dinfer_batch.cli.options import flag
from dinfer_batch.errors import OptionError, UserError
from dinfer_batch.formats.limits import InvalidParam
from dinfer_batch.formats.lines.columns import Columns
from dinfer_batch.formats.lines.requests import parse_line
from dinfer_batch.formats.parameters.params import CHECKS, MAX_STOP_CHARS, MAX_STOPS
from dinfer_batch.jobs.create import input_columns, job_input, make_spec, parse_metadata
from dinfer_batch.jobs.expiry import window_seconds
from dinfer_batch.jobs.intake.line_check import LineChecker, TextBatch
from dinfer_batch.jobs.spec import JobOptions, JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_models import MODELS_DIR


def takes_integers(name):
    """Whether the parameter is an integer one: 2 passes its check, 2.5 does not."""
    check = CHECKS[name]
    try:
        check(name, 2)
    except InvalidParam:
        return False
    try:
        check(name, 2.5)
    except InvalidParam:
        return True
    return False


INTEGER_PARAMS = sorted(name for name in CHECKS if takes_integers(name))


def test_the_integer_parameters_are_found():
    assert {"max_tokens", "n", "seed", "steps", "top_k", "max_post_steps"} <= set(
        INTEGER_PARAMS)


def completion(**body):
    return {"custom_id": "c", "method": "POST", "url": "/v1/completions",
            "body": {"prompt": "hi"} | body}


def chat(**body):
    return {"custom_id": "c", "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": "hi"}]} | body}


def responses(**body):
    return {"custom_id": "r", "method": "POST", "url": "/v1/responses",
            "body": {"input": "hi"} | body}


def error_of(line):
    return parse_line(json.dumps(line), 3).error


# every integer field of a line, as each endpoint spells it
INTEGER_FIELDS = (
    [(completion, name) for name in INTEGER_PARAMS]
    + [(chat, "max_completion_tokens"), (responses, "max_output_tokens"),
       (responses, "n"), (responses, "seed")])


@pytest.mark.parametrize(("shape", "name"), INTEGER_FIELDS)
@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_refused_for_every_integer_field(shape, name, value):
    needs = {"logprobs": True} if name == "top_logprobs" else {}
    error = error_of(shape(**{name: value} | needs))
    assert error is not None and error.startswith(f"line 3: {name} must be ")
    assert f"got {value}" in error


@pytest.mark.parametrize("field", ["spans", "infill_lengths"])
def test_a_boolean_is_refused_in_integer_lists(field):
    line = {"prompt": "a", "suffix": "b", field: [True]}
    error = error_of(line)
    assert error is not None and f"{field} must be" in error and "[True]" in error


@pytest.mark.parametrize("name", INTEGER_PARAMS)
def test_a_boolean_is_refused_for_every_integer_job_option(name, tiny_checkpoint):
    with pytest.raises(UserError, match=f"invalid option: {name} must be .*got True"):
        make_spec(str(tiny_checkpoint), {name: True}, JobOptions(queue="q", chunk_size=8),
                  MODELS_DIR)


@pytest.mark.parametrize(("line", "spelt"), [
    (completion(max_tokens=0), "max_tokens"),
    (chat(max_completion_tokens=0), "max_completion_tokens"),
    (chat(max_tokens=0), "max_tokens"),
    (responses(max_output_tokens=0), "max_output_tokens"),
    (responses(max_output_tokens="8"), "max_output_tokens"),
])
def test_a_parameter_error_names_the_field_as_spelt(line, spelt):
    error = error_of(line)
    assert error is not None and error.startswith(f"line 3: {spelt} must be a positive integer")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model_info(str(tiny_checkpoint), MODELS_DIR)


def checked(model, lines, **params):
    checker = LineChecker(JobSpec(model=model, queue="q", chunk_size=8, params=params),
                          max_request_tokens=params.pop("max_request_tokens", None))
    return [line.error for line in checker(TextBatch(1, [json.dumps(x) for x in lines]))]


def test_an_answer_past_the_context_names_its_field_and_value(model):
    context = model.max_context
    huge = 10**7
    errors = checked(model, [completion(max_tokens=huge), chat(max_completion_tokens=huge),
                             responses(max_output_tokens=huge),
                             {"prompt": "a", "suffix": ["b", "c"], "spans": [context, 8]},
                             {"prompt": "a", "suffix": "b", "infill_lengths": [8, context]}])
    assert errors[0] == (
        f"line 1: max_tokens=10,000,000 asks for 10,000,000 answer tokens, as many as the "
        f"model's context of {context:,} or more; at most {context:,} fit beside this "
        "prompt")  # its 2 characters: at least 0 tokens
    assert errors[1].startswith("line 2: max_completion_tokens=10,000,000 asks for")
    assert errors[2].startswith("line 3: max_output_tokens=10,000,000 asks for")
    assert errors[3].startswith(f"line 4: spans [{context}, 8] asks for {context + 8:,}")
    assert errors[4].startswith(f"line 5: infill_lengths up to {context:,} asks for")
    # a prompt that alone leaves too little room: the prompt is named, and the field
    long = "word " * (context // 2)
    [error] = checked(model, [responses(input=long, max_output_tokens=context // 2)])
    assert error.startswith("line 1: prompt is too long: ")
    assert f"answer tokens (max_output_tokens={context // 2:,}) exceed" in error
    # the job's default and the model's
    [error] = checked(model, [{"prompt": long}], max_tokens=context // 2)
    assert f"(the batch's max_tokens={context // 2:,})" in error


def test_engine_checks_and_ceilings_name_the_field_as_spelt(model):
    errors = checked(model, [responses(max_output_tokens=9, block_length=4, steps=4),
                             chat(max_completion_tokens=9, block_length=4, steps=4),
                             completion(max_tokens=9, block_length=4, steps=4)])
    assert errors == [f"line {i}: steps=4 must be a multiple of the number of blocks (3: "
                      f"{name}=9 rounded up to blocks of block_length=4)" for i, name in
                      ((1, "max_output_tokens"), (2, "max_completion_tokens"),
                       (3, "max_tokens"))]
    [error] = checked(model, [responses(max_output_tokens=7, block_length=8, steps=9)])
    assert error.startswith("line 1: steps must be at most 8 (max_output_tokens rounded up "
                            "to whole blocks (one")
    [error] = checked(model, [responses(max_output_tokens=64, n=4)], max_request_tokens=100)
    assert error == ("line 1: max_output_tokens=64 x n=4 = 256 tokens is above this key's "
                     "max_request_tokens of 100; ask for fewer tokens or samples")


def test_stop_is_bounded_in_count_and_length():
    assert error_of(completion(stop=["a"] * MAX_STOPS)) is None
    assert error_of(completion(stop="x" * MAX_STOP_CHARS)) is None
    assert error_of(completion(stop=["a"] * 10_000)) == (
        "line 3: stop must hold at most 4 sequences (OpenAI's limit), got 10,000")
    assert error_of(chat(stop=["a", "b" * (MAX_STOP_CHARS + 1)])) == (
        f"line 3: stop[1] must be at most {MAX_STOP_CHARS} characters, got 257")
    assert error_of(responses(stop="x" * 5000)) == (
        f"line 3: stop must be at most {MAX_STOP_CHARS} characters, got 5,000")


@pytest.mark.parametrize(("window", "seconds"), [("24h", 86400), ("7d", 604800),
                                                 ("168h", 604800), ("1s", 1)])
def test_completion_windows_up_to_seven_days(window, seconds):
    assert window_seconds(window) == seconds


@pytest.mark.parametrize(("window", "seconds"), [("8d", "691,200"), ("169h", "608,400"),
                                                 ("8760h", "31,536,000"),
                                                 ("9999999d", "863,999,913,600")])
def test_a_longer_completion_window_is_refused_naming_the_bound(window, seconds):
    with pytest.raises(UserError) as refused:
        window_seconds(window)
    assert str(refused.value) == (f"completion_window must be at most 7d (168h, 604,800s), "
                                  f"got {window!r} ({seconds}s)")


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("body", "message"), [
    ({"input": [{"role": "user", "content": nested(500)}]},
     'input[0].content[0] must be a content part object ({"type": "input_text", "text": '
     '...}), got a list [[[[...]]]]'),
    ({"input": [nested(500)]},
     'input[0] must be a message object ({"role", "content"}), got a list [[[[...]]]]'),
    ({"input": [{"role": "user", "content": [{"text": "hi"}]}]},
     "input[0].content[0] must be a content part object"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": {"a": 1}}]}]},
     "input[0].content[0].text must be a string, got an object {'a': 1}"),
    ({"input": [{"role": "user", "content": [None]}]},
     "input[0].content[0] must be a content part object ({\"type\": \"input_text\", "
     "\"text\": ...}), got null"),
])
def test_a_nested_responses_input_names_the_part_and_what_it_got(body, message):
    error = error_of({"url": "/v1/responses", "body": body})
    assert error is not None and error.startswith(f"line 3: {message}")
    assert "type None" not in error


def integer_options():
    """(command path, option) for every integer option of every CLI command."""
    import click

    from dinfer_batch.cli.app import main

    found = []
    stack = [((), main)]
    while stack:
        path, command = stack.pop()
        if isinstance(command, click.Group):
            stack.extend((path + (name,), sub) for name, sub in command.commands.items())
            continue
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(
                    param.type, click.types._NumberParamTypeBase) and param.type.name in (
                    "integer", "integer range"):
                found.append((path, param.opts[0]))
    return sorted(found)


INTEGER_OPTIONS = integer_options()


def test_the_cli_has_integer_options():
    assert (("submit",), "--chunk-size") in INTEGER_OPTIONS
    assert (("submit",), "--max-tokens") in INTEGER_OPTIONS


@pytest.mark.parametrize(("path", "option"), INTEGER_OPTIONS,
                         ids=[" ".join(p) + " " + o for p, o in INTEGER_OPTIONS])
def test_every_integer_cli_option_refuses_a_boolean(path, option):
    from click.testing import CliRunner

    from dinfer_batch.cli.app import main

    result = CliRunner().invoke(main, [*path, option, "true"])
    assert result.exit_code == 2, result.output
    assert option in result.output and "'true' is not a valid integer" in result.output


def test_job_options_are_named_as_fields_and_the_command_line_names_its_flags():
    """jobs/create.py is the scheduler's as well as the CLI's: its errors name fields, and
    the CLI, where the user typed flags, names the flags."""
    cases = [
        (lambda: job_input(None, "a {x}", None), "template and vars go together",
         "--template and --vars go together"),
        (lambda: parse_metadata(["{x}"]), "metadata takes KEY=VALUE, got '{x}'",
         "--metadata takes KEY=VALUE, got '{x}'"),
        (lambda: input_columns({"prompt_column": "q", "messages_column": "m"}),
         "give prompt_column or messages_column, not both",
         "give --prompt-column or --messages-column, not both"),
        (lambda: job_input(None, "a {x}", None, columns=Columns("q", False, "custom_id")),
         "prompt_column and messages_column go with file, not template",
         "--prompt-column and --messages-column go with FILE, not --template"),
    ]
    for make, as_fields, as_flags in cases:
        with pytest.raises(OptionError) as raised:
            make()
        assert (str(raised.value), raised.value.naming(flag)) == (as_fields, as_flags)
