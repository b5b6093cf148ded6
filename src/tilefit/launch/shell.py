"""A pasted launch command -> the engine invocation in it: which engine, its arguments, and the
environment it starts with.

Commands are pasted as people post them: `\\` line continuations (with stray trailing spaces),
`export` lines and leading VAR=value, shell variables, wrappers (docker run -e, mpirun -x, env,
hf jobs run), comments and a trailing `&`. Nothing is executed; variables are expanded only from
assignments in the command itself.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tilefit.errors import UsageError

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_CONTINUATION = re.compile(r"\\[ \t]*\r?\n")
# `--flag 8 \   # what it does` with the next line starting with a flag: docs annotate continued
# lines this way (vLLM's expert_parallel_deployment.md). A shell ends the command there (the
# backslash escapes a space, the rest is a comment); the text means a continuation.
_COMMENTED_CONTINUATION = re.compile(r"\\[ \t]+#[^\n]*\n(?=[ \t]*-)")
_SEPARATORS = {";", "&&", "||", "&", "|"}
# An output or input redirection at the start of a word: `2>&1`, `>> log`, `&> log`, `< in`. With
# a `&N` / `&-` target it is one word; otherwise the file name follows (after optional spaces).
_REDIRECT = re.compile(r"\d{0,2}(?:&>>?|>>?|<)(?:&\d{1,2}|&-)?")
# Container images that start an engine's server with the image's entry point.
_IMAGES = (("vllm/vllm-openai", "vllm"), ("lmsysorg/sglang", "sglang"))
# Wrapper flags that set the environment of the command they start.
_ENV_FLAGS = {"-e", "--env", "-x"}


@dataclass(frozen=True, slots=True)
class Invocation:
    engine: str  # "sglang" | "vllm" | "trtllm"
    entry: str  # how it was started, e.g. "python -m sglang.launch_server"
    args: tuple[str, ...]  # the engine's own arguments
    env: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()  # how the text was read where a shell would read it otherwise


def _unquoted_lines(text: str) -> str:
    """`text` with comments dropped and every newline outside quotes made a `;`, so a quoted
    argument may span lines (`bash -c '...'`) while each line stays its own statement."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"' and i + 1 < len(text):
                out.append(text[i:i + 2])
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        elif c == "#" and (not out or out[-1][-1:].isspace() or out[-1][-1:] == ";"):
            while i < len(text) and text[i] != "\n":
                i += 1  # a comment runs to the end of the line
            continue
        elif (m := _REDIRECT.match(text, i)) and (not out or out[-1][-1:] in " \t;|&("):
            i = _past_redirect(text, m)  # `2>&1 | tee log` is not part of the command's words
            out.append(" ")
            continue
        elif c == "\n":
            c = " ; "
        out.append(c)
        i += 1
    return "".join(out)


def _past_redirect(text: str, m: re.Match[str]) -> int:
    """Where the text continues after the redirection `m` and its file name, if it has one."""
    j = m.end()
    if m.group()[-1] not in "<>":
        return j  # `2>&1`, `>&-`: the target is in the word
    while j < len(text) and text[j] in " \t":
        j += 1
    while j < len(text) and not text[j].isspace() and text[j] not in ";|&":
        if text[j] in "'\"":  # a quoted part of the file name, spaces and all
            close = text.find(text[j], j + 1)
            j = len(text) if close < 0 else close + 1
            continue
        j += 1
    return j


def _statements(text: str) -> list[list[str]]:
    """Shell words per statement (newlines, ;, &&, ||, | and & end a statement)."""
    text = _unquoted_lines(_CONTINUATION.sub(" ", text.replace("\r\n", "\n")))
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        words = list(lex)
    except ValueError as e:  # an unclosed quote
        raise UsageError(f"cannot read the launch command: {e} in {text.strip()[:80]!r}") from None
    out: list[list[str]] = []
    current: list[str] = []
    for w in words:
        if w in _SEPARATORS or set(w) <= set(";&|"):
            out.append(current)
            current = []
        else:
            current.append(w)
    out.append(current)
    return [s for s in out if s]


def _expand(word: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), word)


def _expand_words(words: list[str], env: dict[str, str]) -> list[str]:
    """The statement's words after expansion. A word that is one known variable alone (`$X`,
    `${X}`) is split at whitespace as a shell splits an unquoted expansion: an empty value leaves no
    word, `--tp 8` two. (The quotes are gone by now, so a quoted "$X" is split too; launch scripts
    quote paths, which hold no spaces, and leave flag lists unquoted.)"""
    out: list[str] = []
    for w in words:
        m = _VAR.fullmatch(w)
        name = m and (m.group(1) or m.group(2))
        if name and name in env:
            out += env[name].split()
        else:
            out.append(_expand(w, env))
    return out


def _entry(words: list[str]) -> tuple[int, int, str, str] | None:
    """(start, end, engine, entry text) of the engine entry point in one statement's words."""
    for i, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if base.startswith("python") and nxt == "-m" and i + 2 < len(words):
            module = words[i + 2]
            if module in ("sglang.launch_server", "sglang.srt.server"):
                return i, i + 3, "sglang", f"{base} -m {module}"
            if module.startswith("vllm.entrypoints.openai.api_server"):
                return i, i + 3, "vllm", f"{base} -m {module}"
            if module in ("vllm.entrypoints.cli.main",) and i + 3 < len(words) and words[i + 3] == "serve":
                return i, i + 4, "vllm", f"{base} -m {module} serve"
            if module == "tensorrt_llm.commands.serve":
                # The module behind trtllm-serve (`if __name__ == "__main__": main()` in
                # tensorrt_llm/commands/serve.py at 00209af1); its group runs `serve` by default.
                end = i + 4 if i + 3 < len(words) and words[i + 3] == "serve" else i + 3
                return i, end, "trtllm", f"{base} -m {module}"
        if base in ("sglang", "vllm") and nxt == "serve":
            return i, i + 2, base, f"{base} serve"
        if base == "trtllm-serve":
            end = i + 2 if nxt == "serve" else i + 1
            return i, end, "trtllm", "trtllm-serve"
        for image, engine in _IMAGES:
            if w.split(":", 1)[0].endswith(image) and i > 0:
                # The image's entry point runs the server; `vllm serve` may follow explicitly.
                rest = words[i + 1:i + 3]
                if rest == [engine, "serve"]:
                    return i, i + 3, engine, f"{w} {engine} serve"
                return i, i + 1, engine, f"{w} (image entry point)"
    return None


def parse_command(command: str | list[str] | tuple[str, ...]) -> Invocation:
    """The engine invocation in `command` (text as pasted, or argv words)."""
    if isinstance(command, (list, tuple)):
        text = " ".join(shlex.quote(w) for w in command)
    else:
        text = str(command)
    text, joined = _COMMENTED_CONTINUATION.subn(" ", text.replace("\r\n", "\n"))
    notes = (f"{joined} line(s) end in '\\ # comment': a shell would end the command at the first "
             f"(the backslash escapes a space, the rest is a comment); read as the line continuations "
             f"the text means",) if joined else ()
    shell: dict[str, str] = {}  # VAR=value lines: usable for $VAR, not exported
    exported: dict[str, str] = {}
    for words in _statements(text):
        words = _expand_words(words, {**shell, **exported})
        found = _entry(words)
        if found is None:
            inner = _shell_c(words)
            if inner is not None:
                # `docker run ... IMAGE bash -c '<commands>'`: the inner shell sees the wrapper's -e
                # variables and the exported ones; read its commands the same way.
                env = {**exported, **_wrapper_env(words)}
                try:
                    return parse_command(_exports(env) + inner)
                except UsageError:
                    pass
            _assignments(words, shell, exported)
            continue
        start, end, engine, entry = found
        env = {**exported, **_wrapper_env(words[:start])}
        return Invocation(engine, entry, tuple(words[end:]), tuple(sorted(env.items())), notes)
    raise UsageError("no sglang, vLLM or TensorRT-LLM server command found; tilefit reads "
                     "`python -m sglang.launch_server ...`, `sglang serve ...`, `vllm serve MODEL ...`, "
                     "`python -m vllm.entrypoints.openai.api_server ...` and `trtllm-serve MODEL ...`")


def _wrapper_env(before: list[str]) -> dict[str, str]:
    """VAR=value before the entry point: leading assignments, `env`, docker -e/--env, mpirun -x."""
    env: dict[str, str] = {}
    for j, w in enumerate(before):
        m = _ASSIGN.match(w)
        prev = before[j - 1] if j else ""
        if prev in _ENV_FLAGS and m:
            env[m.group(1)] = m.group(2)
        elif w.startswith("--env=") and _ASSIGN.match(w[6:]):
            k, v = _ASSIGN.match(w[6:]).groups()  # type: ignore[union-attr]
            env[k] = v
        elif m and prev not in ("-v", "--volume", "-p"):
            env[m.group(1)] = m.group(2)
    return env


def _shell_c(words: list[str]) -> str | None:
    """The command string of `bash -c '...'` / `sh -c '...'` in a statement, if any."""
    for i, w in enumerate(words[:-2]):
        if w.rsplit("/", 1)[-1] in ("bash", "sh") and words[i + 1] == "-c":
            return words[i + 2]
    return None


def _exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def _assignments(words: list[str], shell: dict[str, str], exported: dict[str, str]) -> None:
    """`export A=1 B=2`, `A=1` and `env A=1` lines before the command."""
    if words[0] == "export":
        for w in words[1:]:
            m = _ASSIGN.match(w)
            if m:
                exported[m.group(1)] = m.group(2)
        return
    for w in words:
        m = _ASSIGN.match(w)
        if m:
            shell[m.group(1)] = m.group(2)
        elif w != "env":
            break
