#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Allocation attempts on one provider from another process.

``allocator.py URL PROVIDER STATE_PATH --attempts 50 --mode during|spread``

``during``: once the programming journal in STATE_PATH shows the device
fenced, all attempts at once (one thread each, released together).
``spread``: once the job is journaled, the attempts start at random
moments over ``--spread`` seconds, denser at first (some race the
fence). An allocation that lands is held ``--hold`` seconds,
then deleted. Prints a JSON list: one record per attempt with its
wall-clock send and receive times, the status and the consumer.
"""

import argparse
import json
import random
import sqlite3
import sys
import threading
import time
import uuid

import requests


def wait_step(state_path, step, timeout=60):
    """Until a job of the journal in ``state_path`` reached ``step``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(state_path) as db:
                if db.execute('SELECT 1 FROM program_steps WHERE step = ?',
                              (step,)).fetchone():
                    return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.005)
    raise SystemExit('no job reached step %s' % step)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('url')
    parser.add_argument('provider')
    parser.add_argument('state_path')
    parser.add_argument('--attempts', type=int, default=50)
    parser.add_argument('--mode', choices=['during', 'spread'],
                        default='during')
    parser.add_argument('--spread', type=float, default=3.0)
    parser.add_argument('--hold', type=float, default=0.1)
    args = parser.parse_args(argv)
    headers = {'X-Auth-Token': 'admin',
               'OpenStack-API-Version': 'placement 1.39'}
    records = []
    lock = threading.Lock()
    barrier = threading.Barrier(args.attempts)

    def attempt(delay):
        session = requests.Session()
        session.headers.update(headers)
        consumer = str(uuid.uuid4())
        if args.mode == 'during':
            barrier.wait()
        else:
            time.sleep(delay)
        body = {'allocations': {args.provider: {'resources': {'FPGA': 1}}},
                'project_id': uuid.uuid4().hex, 'user_id': uuid.uuid4().hex,
                'consumer_generation': None, 'consumer_type': 'INSTANCE'}
        for _try in range(20):
            # The test Placement is one thread with a small listen
            # backlog: a connection it refused is sent again (and the
            # attempt counts from its last send).
            sent = time.time()
            try:
                resp = session.put(args.url + '/allocations/%s' % consumer,
                                   json=body, timeout=60)
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        else:
            raise SystemExit('Placement refused every connection')
        received = time.time()
        record = {'consumer': consumer, 'sent': sent,
                  'received': received, 'status': resp.status_code}
        if resp.status_code == 204:
            time.sleep(args.hold)
            record['release_sent'] = time.time()
            session.delete(args.url + '/allocations/%s' % consumer,
                           timeout=60)
            record['released'] = time.time()
        with lock:
            records.append(record)

    if args.mode == 'during':
        wait_step(args.state_path, 'fenced')
    else:
        # From the moment the job is journaled, denser at first: some
        # attempts race the fence itself.
        wait_step(args.state_path, 'created')
    threads = [threading.Thread(target=attempt, args=(
        args.spread * random.random() ** 2,)) for _ in range(args.attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    json.dump(sorted(records, key=lambda r: r['sent']), sys.stdout)
    return 0


if __name__ == '__main__':
    sys.exit(main())
