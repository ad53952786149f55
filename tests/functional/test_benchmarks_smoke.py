"""The benchmark scripts run and write their files (tiny sizes).

A smoke test only: nothing here is timed or compared. The real runs are
``python benchmarks/run_all.py`` (see doc/source/admin/performance.rst).
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import docutils.core
import docutils.utils
import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BENCH = os.path.join(TOP, 'benchmarks')


def _run(*cmd, timeout=120):
    env = dict(os.environ, PYTHONWARNINGS='ignore',
               OS_NOVA_DISABLE_EVENTLET_PATCHING='1',
               PYTHONPATH=os.pathsep.join(
                   p for p in (TOP, os.environ.get('PYTHONPATH')) if p))
    proc = subprocess.run([sys.executable] + list(cmd), cwd=TOP, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _run_all():
    sys.path.insert(0, BENCH)
    try:
        import run_all
    finally:
        sys.path.remove(BENCH)
    return run_all


def test_discovery_tiny(tmp_path):
    if not shutil.which('lspci'):
        pytest.skip('no lspci (pciutils)')
    out = tmp_path / 'discovery.md'
    _run(os.path.join(BENCH, 'discovery.py'), '--sizes', '100', '--runs',
         '1', '--no-cyborg', '--output', str(out))
    text = out.read_text()
    assert '| 100 functions | cyborg-nova discovery (all drivers) |' in text
    assert '| 100 functions | lspci -nnn -D (one run) |' in text
    data = json.loads((tmp_path / 'discovery.json').read_text())
    assert [h['functions'] for h in data['hosts']] == [100]


def test_scale_registration_tiny(tmp_path):
    if not os.path.exists(os.path.join(TOP, '.venv-placement', 'bin',
                                       'gunicorn')):
        pytest.skip('no .venv-placement: tools/setup-bench-venvs.sh')
    out = tmp_path / 'scale.md'
    _run(os.path.join(BENCH, 'scale.py'), '--register-hosts', '1,2',
         '--backends', 'sqlite', '--durable-check', '0',
         '--candidate-hosts', '', '--clients', '1', '--threads', '1',
         '--output', str(out))
    text = out.read_text()
    assert '| sqlite | 1 | 2 |' in text
    assert '| sqlite | 1 | 1 (first of 2) |' in text
    data = json.loads((tmp_path / 'scale.json').read_text())
    regs = {r['hosts']: r for r in data['registration']}
    assert set(regs) == {1, 2}
    assert regs[2]['failed_hosts'] == 0
    # Nova's report client: dozens of requests for a host of 10
    # accelerators (the exact count is the benchmark's, not this test's).
    assert regs[2]['requests'] > 2 * 20


def test_report_and_doc_tables(tmp_path):
    """results.md and the docs' tables from the recorded results."""
    run_all = _run_all()
    res = tmp_path / 'results'
    res.mkdir()
    for path in glob.glob(os.path.join(BENCH, 'results', '*')):
        shutil.copy(path, res)
    done = {'discovery': {'seconds': 1.0, 'returncode': 0,
                          'other_cpu_share': 0.1}}
    run_all.write_results_md(str(tmp_path), str(res), done, False, 60.0,
                             str(tmp_path / 'results.md'))
    text = (tmp_path / 'results.md').read_text()
    assert '| benchmark | what was compared | result | ratio | machine |' \
        in text
    rows = [line for line in text.splitlines()
            if line.startswith('| ') and not line.startswith('| benchmark')]
    assert any(r.startswith('| Discovery, 2,000 PCI functions') for r in rows)
    dest = tmp_path / 'doc'
    names = run_all.write_doc_tables(str(res), str(dest), done, False, 60.0)
    assert 'summary.inc' in names
    for name in names:
        source = (dest / name).read_text()
        # Valid reStructuredText, without a warning.
        docutils.core.publish_doctree(
            source, settings_overrides={
                'halt_level': docutils.utils.Reporter.WARNING_LEVEL,
                'report_level': docutils.utils.Reporter.WARNING_LEVEL})


def test_md_tables_to_rst():
    run_all = _run_all()
    md = ('# T\n\n| a | b |\n|---|---:|\n| `x` | - |\n\n## Next\n\n'
          '| c |\n|---|\n| 1 |\n')
    assert run_all.md_tables(md) == [[['a', 'b'], ['`x`', '-']],
                                     [['c'], ['1']]]
    assert run_all.md_tables(md, '## Next') == [[['c'], ['1']]]
    assert run_all.md_tables(md, '## Missing') == []
    rst = run_all.rst_table([['a', 'b'], ['`x`', '-']])
    assert '   * - ``x``\n     - \\-\n' in rst
