"""The launcher shell reader: which words are commands, which output is read, which names are
expanded; strings, comments and heredoc bodies are data."""

from npu_migrate.migrate.files.shell_words import parse


def _commands(text, **kwargs):
    return [([w.value if w.value is not None else w.raw for w in c.words], c.captured, c.piped_in, c.piped_out)
            for c in parse(text, **kwargs).commands]


def _expanded(text, **kwargs):
    shell = parse(text, **kwargs)
    return [(e.name, text[e.start:e.end]) for e in shell.expansions]


def test_commands_lists_pipes_and_substitutions():
    text = 'A=1 torchrun --nproc_per_node=$(nvidia-smi -L | wc -l) train.py && echo done | tee log\n'
    assert _commands(text) == [
        (["nvidia-smi", "-L"], True, False, True), (["wc", "-l"], True, True, False),
        (["A=1", "torchrun", "--nproc_per_node=$(nvidia-smi -L | wc -l)", "train.py"], False, False, False),
        (["echo", "done"], False, False, True), (["tee", "log"], False, True, False)]


def test_quotes_comments_and_heredocs_are_data():
    text = ("# CUDA_VISIBLE_DEVICES=1\n"
            "echo 'export $CUDA_VISIBLE_DEVICES' \"$NCCL_DEBUG\"  # $HIDDEN\n"
            "cat <<EOF > run.sh\nexport CUDA_VISIBLE_DEVICES=$X\nEOF\n"
            "cat <<-'END'\n\t$Y\n\tEND\n"
            "echo after\n")
    assert _expanded(text) == [("NCCL_DEBUG", "NCCL_DEBUG")]
    assert _commands(text)[-1] == (["echo", "after"], False, False, False)


def test_expansions_inside_braces_double_quotes_and_backticks():
    text = 'G="${CUDA_VISIBLE_DEVICES:-$DEFAULT}" N=`echo $M` R=$((A+1))\n'
    assert [name for name, _ in _expanded(text)] == ["CUDA_VISIBLE_DEVICES", "DEFAULT", "M"]


def test_redirections_are_not_arguments_and_line_continuations_join():
    words, *_ = _commands("nvidia-smi > gpus.txt 2>&1 \\\n  && true\n")[0]
    assert words == ["nvidia-smi"]
    assert parse("nvidia-smi > gpus.txt\n").commands[0].redirects[0].raw == "gpus.txt"


def test_make_recipes_read_make_and_shell_variables():
    text = "\tCUDA_VISIBLE_DEVICES=$(DEVICES) python x.py $$CUDA_VISIBLE_DEVICES $(shell nproc)\n"
    found = [(e.name, e.make) for e in parse(text, make=True).expansions]
    assert found == [("DEVICES", True), ("CUDA_VISIBLE_DEVICES", False)]


def test_offsets_point_at_the_names():
    text = "x\nexport NCCL_SOCKET_IFNAME=eth0\n"
    word = parse(text).commands[1].words[1]
    assert text[word.start:word.end] == "NCCL_SOCKET_IFNAME=eth0"


def test_make_shell_functions_are_captured_commands():
    text = "NGPUS := $(shell nvidia-smi -L | wc -l)\n"
    assert _commands(text, make=True) == [(["nvidia-smi", "-L"], True, False, True), (["wc", "-l"], True, True, False),
                                          (["NGPUS", ":=", "$(shell nvidia-smi -L | wc -l)"], False, False, False)]
