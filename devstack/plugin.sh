#!/bin/bash
# plugin.sh - devstack plugin for cyborg-nova
#
# enable_plugin cyborg-nova <git url> in local.conf installs the package
# into Nova's environment, points nova-compute at cyborg-nova's compute
# driver, starts the agent and the conductor-lite, and creates sample
# accelerator flavors.

source $CYBORG_NOVA_DIR/devstack/lib/cyborg-nova

if is_service_enabled cyborg-nova-agent cyborg-nova-conductor; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing cyborg-nova"
        install_cyborg_nova
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring cyborg-nova"
        configure_cyborg_nova
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Starting cyborg-nova"
        start_cyborg_nova
        create_cyborg_nova_flavors
    elif [[ "$1" == "stack" && "$2" == "test-config" ]]; then
        if is_service_enabled tempest; then
            configure_cyborg_nova_tempest
        fi
    fi

    if [[ "$1" == "unstack" ]]; then
        stop_cyborg_nova
    fi

    if [[ "$1" == "clean" ]]; then
        cleanup_cyborg_nova
    fi
fi
