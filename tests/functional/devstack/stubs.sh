#!/bin/bash
# Stand-ins for the devstack functions the plugin calls. Each records its
# call in $CALLS; iniset writes a real INI file (through Python's
# configparser) so the test can read what the plugin configured.

function _record {
    echo "$*" >> $CALLS
}
function echo_summary { _record "echo_summary $*"; }
function pip_install { _record "pip_install $*"; }
function run_process { _record "run_process $1 $2"; }
function stop_process { _record "stop_process $*"; }
function openstack { _record "openstack $*"; }
function enable_service { _record "enable_service $*"; }
function is_service_enabled {
    local service
    for service in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$service,"* ]] && return 0
    done
    return 1
}
function sudo {
    # No root here: run the command as this user.
    "$@"
}
function hostname { echo test-compute; }
function iniset {
    _record "iniset $*"
    python3 - "$@" <<'PY'
import configparser, os, sys
path, section, key, value = sys.argv[1:5]
parser = configparser.RawConfigParser()
parser.optionxform = str
parser.read(path)
if section != 'DEFAULT' and not parser.has_section(section):
    parser.add_section(section)
parser.set(section, key, value)
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, 'w') as f:
    parser.write(f)
PY
}
