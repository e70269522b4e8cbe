# Sourced by the scripts in this folder: installs what a build needs, if missing.
#
# Needs: cmake (>= 3.25), ninja, a C++20 compiler, Eigen 3.4, doctest, CLI11, nlohmann-json;
# for the Python module and its tests: pybind11, Python's headers, NumPy, pytest, DLPack.
# Installs with apt-get when run as root or with sudo; otherwise prints the
# exact install line and stops. Extra packages can be passed as arguments.
ensure_packages() {
  local wanted=(cmake ninja-build g++ libeigen3-dev doctest-dev libcli11-dev nlohmann-json3-dev
                pybind11-dev python3-dev python3-numpy python3-pytest libdlpack-dev "$@")
  local missing=()
  local pkg
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local install=(apt-get install -y --no-install-recommends "${missing[@]}")
  if [ "$(id -u)" -eq 0 ]; then
    echo "Installing: ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${install[@]}"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    echo "Installing with sudo: ${missing[*]}"
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive "${install[@]}"
  else
    echo "Missing packages: ${missing[*]}. Install them with:" >&2
    echo "  sudo apt-get update && sudo ${install[*]}" >&2
    return 1
  fi
}
