"""The installed version, as pbr computes it."""

import pbr.version

version_info = pbr.version.VersionInfo('cyborg-nova')


def version_string() -> str:
    try:
        return version_info.version_string()
    except Exception:
        # Running from a source tree that was never installed.
        return 'unknown'
