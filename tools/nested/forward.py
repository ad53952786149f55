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

"""L1's loopback ports forwarded to the same ports of the host.

The services of a cloud on the host listen on the host's loopback, and
Keystone's catalog names them there (``http://127.0.0.1:PORT``). In L1
that address is L1 itself; the host's loopback is QEMU's user-mode
gateway. This listens on L1's 127.0.0.1 at each port given and copies
every connection both ways to the gateway's same port, so a service in
L1 (nova-compute) uses the catalog as a compute on the host would.

Usage (in L1): python3 forward.py --to 10.0.2.2 PORT [PORT...]
Prints ``forwarding PORT...`` once it listens; runs until killed.
"""

import argparse
import asyncio


async def pipe(reader: asyncio.StreamReader,
               writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def handler(target: str, port: int):
    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(target,
                                                                 port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer),
                             pipe(up_reader, writer))
    return handle


async def serve(target: str, ports: list[int]) -> None:
    servers = [await asyncio.start_server(handler(target, port),
                                          '127.0.0.1', port)
               for port in ports]
    print('forwarding %s' % ' '.join(map(str, ports)), flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--to', required=True, help='address to forward to')
    parser.add_argument('ports', nargs='+', type=int)
    args = parser.parse_args()
    asyncio.run(serve(args.to, args.ports))


if __name__ == '__main__':
    main()
