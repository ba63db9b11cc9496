#!/usr/bin/python3
"""Extracts the runnable examples of README.md and of every man page's EXAMPLES section.

Prints one shell line per example for tests/integration/doc_examples.sh to source:
    doc_cmd   SOURCE EXPECTED_RC COMMAND
    doc_skip  SOURCE COMMAND REASON
    doc_full  SOURCE COMMAND REASON        (run only with SAKER_TEST_FULL=1)
    doc_setup SOURCE COMMAND
    doc_begin SOURCE                       (a new page: a fresh scratch directory)
The markers are documented in saker(7), section DOCUMENTATION EXAMPLES. Anything the
extractor does not understand is a command: a page cannot hide an example by accident.
"""
import re
import shlex
import sys
from pathlib import Path

MARK = re.compile(r'doc-example:\s*(\w+)\s*(.*?)\s*$')


def unroff(line):
    """Roff escapes to the text a reader of the page sees (and types)."""
    out = line
    for esc, txt in ((r'\(lq', '"'), (r'\(rq', '"'), (r'\(aq', "'"), (r'\(cq', "'"), (r'\(em', '--'), (r'\(en', '-')):
        out = out.replace(esc, txt)
    out = re.sub(r'\\f[BIRP]|\\f\(..|\\&|\\c$', '', out)
    out = out.replace(r'\-', '-').replace(r'\e', '\\').replace('\\\\', '\\').replace(r'\ ', ' ')
    return out


def emit(kind, source, *fields):
    print(' '.join([kind, shlex.quote(source)] + [shlex.quote(str(f)) for f in fields]))


def commands(lines):
    """Joins continuation lines; drops blanks and comments. Yields (command, markers)."""
    pending, marks = '', []
    for text, line_marks in lines:
        marks += line_marks
        if pending:
            pending += '\n' + text
        else:
            if not text.strip() or text.lstrip().startswith('#'):
                continue
            pending = text
        if pending.endswith('\\'):
            continue
        yield pending, marks
        pending, marks = '', []
    if pending:
        yield pending, marks


def run_marks(source, cmd, marks):
    expect = 0
    for kind, arg in marks:
        if kind == 'setup':
            emit('doc_setup', source, arg)
    for kind, arg in marks:
        if kind == 'skip':
            emit('doc_skip', source, cmd, arg or 'marked skip')
            return
        if kind == 'full':
            emit('doc_full', source, cmd, arg or 'long')
            return
        if kind == 'expect':
            expect = int(arg)
    emit('doc_cmd', source, expect, cmd)


def man_page(path):
    source = path.name
    emit('doc_begin', source)
    in_examples = in_nf = text_mode = False
    lines, marks = [], []
    for raw in path.read_text(errors='replace').splitlines():
        if raw.startswith('.SH'):
            in_examples = re.match(r'\.SH\s+"?EXAMPLES?"?\s*$', raw) is not None
            continue
        if not in_examples:
            continue
        if raw.startswith('.\\"'):
            m = MARK.search(raw)
            if m:
                kind, arg = m.group(1), m.group(2)
                if kind == 'text':
                    # The commands before the marker run; the rest of the block is text.
                    for cmd, cmd_marks in commands(lines):
                        run_marks(source, cmd, cmd_marks)
                    lines, text_mode = [], True
                else:
                    marks.append((kind, arg))
            continue
        if raw.startswith('.nf'):
            in_nf, lines = True, []
            continue
        if raw.startswith('.fi'):
            if not text_mode:
                for cmd, cmd_marks in commands(lines):
                    run_marks(source, cmd, cmd_marks)
            in_nf = text_mode = False
            lines = []
            continue
        if not in_nf or text_mode or raw.startswith('.'):
            continue
        lines.append((unroff(raw), marks))
        marks = []
    if marks:  # markers after the last command (e.g. a trailing setup) still apply
        for kind, arg in marks:
            if kind == 'setup':
                emit('doc_setup', source, arg)


def readme(path):
    source = path.name
    emit('doc_begin', source)
    block, marks, pending_marks = None, [], []
    for raw in path.read_text().splitlines():
        if block is None:
            m = re.match(r'\s*<!--\s*(doc-example:.*?)\s*-->', raw)
            if m:
                mm = MARK.search(m.group(1))
                if mm:
                    pending_marks.append((mm.group(1), mm.group(2)))
                continue
            if re.match(r'\s*```(sh|bash|shell|console)\s*$', raw):
                block, marks, pending_marks = [], pending_marks, []
            elif raw.strip() and not raw.startswith('<!--'):
                pending_marks = [] if raw.startswith('#') else pending_marks
            continue
        if raw.strip().startswith('```'):
            skip = [a for k, a in marks if k in ('skip', 'full')]
            kind = next((k for k, _ in marks if k in ('skip', 'full')), None)
            for cmd, _ in commands([(line, []) for line in block]):
                # A trailing "# comment" on a README line is part of the command, as in a shell.
                if kind:
                    emit('doc_skip' if kind == 'skip' else 'doc_full', source, cmd, skip[0] or kind)
                else:
                    run_marks(source, cmd, [m for m in marks if m[0] in ('setup', 'expect')])
                    marks = [m for m in marks if m[0] not in ('setup', 'expect')]
            block = None
            continue
        block.append(raw)


def main(srcdir):
    src = Path(srcdir)
    readme(src / 'README.md')
    for page in sorted(src.glob('man/man*/*.[1-8]')):
        man_page(page)


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '.')
