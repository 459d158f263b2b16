# The Debian packages tfcc needs, listed once: sourced by scripts/start and scripts/test.
# Each entry is "package probe": the probe shows the package is there, as a library
# (a soname that ldconfig knows), a file (an absolute path) or a command.

# The window. Qt's offscreen platform (the tests) loads the first group; its xcb platform
# (a real display) also loads the libraries of the second, named by
# `ldd .venv/lib/python3.11/site-packages/PySide6/Qt/plugins/platforms/libqxcb.so`.
TFCC_WINDOW_PACKAGES=(
  "libglib2.0-0 libglib-2.0.so.0"
  "libxkbcommon0 libxkbcommon.so.0"
  "libfontconfig1 libfontconfig.so.1"
  "libdbus-1-3 libdbus-1.so.3"
  "libegl1 libEGL.so.1"
  "libgl1 libGL.so.1"
  "fonts-dejavu-core /usr/share/fonts/truetype/dejavu"

  "libx11-xcb1 libX11-xcb.so.1"
  "libxcb-cursor0 libxcb-cursor.so.0"
  "libxcb-icccm4 libxcb-icccm.so.4"
  "libxcb-image0 libxcb-image.so.0"
  "libxcb-keysyms1 libxcb-keysyms.so.1"
  "libxcb-randr0 libxcb-randr.so.0"
  "libxcb-render-util0 libxcb-render-util.so.0"
  "libxcb-shape0 libxcb-shape.so.0"
  "libxcb-sync1 libxcb-sync.so.1"
  "libxcb-xfixes0 libxcb-xfixes.so.0"
  "libxcb-xinerama0 libxcb-xinerama.so.0"
  "libxcb-xkb1 libxcb-xkb.so.1"
  "libxkbcommon-x11-0 libxkbcommon-x11.so.0"
)

# The tests' SSH hosts: network namespaces with their own sshd, and nftables for the firewall check;
# Slurm (slurmctld, a slurmd per test host, munge) for the tests' Slurm cluster.
TFCC_TEST_PACKAGES=(
  "xvfb /usr/bin/Xvfb"
  "openssh-server /usr/sbin/sshd"
  "openssh-client ssh-keygen"
  "iproute2 ip"
  "nftables nft"
  "slurm-wlm /usr/sbin/slurmctld"
  "slurm-client /usr/bin/sbatch"
  "munge /usr/sbin/munged"
)

# tfcc_missing ENTRY...: prints the package of each entry whose probe finds nothing.
tfcc_missing() {
  local entry package probe libraries
  # /sbin is not on a Debian user's PATH; the cache lines read "<tab>libfoo.so.1 (libc6,x86-64) => /path".
  libraries=$({ /sbin/ldconfig -p || ldconfig -p; } 2>/dev/null | awk 'NR > 1 {print $1}')
  for entry in "$@"; do
    package=${entry%% *}
    probe=${entry#* }
    case $probe in
      /*) [ -e "$probe" ] ;;
      *.so.*) grep -qxF "$probe" <<<"$libraries" ;;
      *) command -v "$probe" >/dev/null ;;
    esac || echo "$package"
  done
}

# tfcc_missing_python PYTHON: the packages PYTHON needs for `PYTHON -m venv` (Debian keeps
# ensurepip in python3-venv).
tfcc_missing_python() {
  if ! command -v "$1" >/dev/null; then
    echo python3 python3-venv
  elif ! "$1" -c 'import ensurepip, venv' 2>/dev/null; then
    echo python3-venv
  fi
}

# tfcc_apt_install PACKAGE...: installs them with apt-get; fails without root or apt-get.
tfcc_apt_install() {
  [ $# -gt 0 ] || return 0
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
