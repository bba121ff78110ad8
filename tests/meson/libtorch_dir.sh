#!/bin/sh
# What Meson says of a -Dlibtorch_dir it cannot use, on libtorch directories made here (empty
# libraries; no libtorch needed): a directory the user names is an error even with
# -Dtorch=auto, one without headers names where it looked, and libraries that do not link with
# the headers are refused at configure time, not left to fail the build's link; a libtorch of
# the old libstdc++ ABI is built against with that ABI.
#   libtorch_dir.sh MESON SOURCE_ROOT SCRATCH_DIR CXX...   (the C++ compiler's command)
set -eu
meson=$1
source_root=$2
scratch=$3
shift 3
# The project is configured with the compiler of the build that runs this test.
CXX=$*
export CXX
rm -rf "$scratch"
mkdir -p "$scratch"

# DIR with libtorch, libtorch_cpu and libc10 that define nothing.
libraries() {
  mkdir -p "$1/lib"
  for name in torch torch_cpu c10; do
    $CXX -shared -o "$1/lib/lib$name.so" -x c++ /dev/null
  done
}

# Configures against DIR, which must fail and say MESSAGE.
refused() {
  dir=$1
  message=$2
  log=$scratch/$(basename "$dir").log
  if "$meson" setup "$scratch/build-$(basename "$dir")" "$source_root" -Dlibtorch_dir="$dir" \
      -Dtests=false -Dexamples=false -Dbench=false -Dtools=false -Dmpi=disabled >"$log" 2>&1; then
    echo "FAIL: configuring with -Dlibtorch_dir=$dir succeeded"
    exit 1
  fi
  if ! grep -qF "$message" "$log"; then
    echo "FAIL: configuring with -Dlibtorch_dir=$dir did not say: $message"
    tail -n 20 "$log"
    exit 1
  fi
  echo "refused $dir: $message"
}

libraries "$scratch/no-headers"
refused "$scratch/no-headers" "libtorch headers not found in $scratch/no-headers/include"

libraries "$scratch/not-linking"
mkdir -p "$scratch/not-linking/include/torch" "$scratch/not-linking/include/c10/core"
: >"$scratch/not-linking/include/torch/torch.h"
cat >"$scratch/not-linking/include/c10/core/Device.h" <<'HEADER'
#include <string>
namespace c10 {
struct Device {
    Device(const std::string& name);
    int index() const;
};
} // namespace c10
HEADER
refused "$scratch/not-linking" \
  "libtorch in $scratch/not-linking/lib does not link with its headers"

# A libtorch of the old libstdc++ ABI (PyTorch's packages before 2.7) is accepted, and built
# against with that ABI: the probe's second try.
mkdir -p "$scratch/old-abi/lib"
cp -R "$scratch/not-linking/include" "$scratch/old-abi/include"
for name in torch torch_cpu; do
  $CXX -shared -o "$scratch/old-abi/lib/lib$name.so" -x c++ /dev/null
done
$CXX -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=0 -I"$scratch/old-abi/include" \
  -o "$scratch/old-abi/lib/libc10.so" -x c++ - <<'SOURCE'
#include <c10/core/Device.h>
c10::Device::Device(const std::string&) {}
int c10::Device::index() const { return 0; }
SOURCE
build=$scratch/build-old-abi
if ! "$meson" setup "$build" "$source_root" -Dlibtorch_dir="$scratch/old-abi" -Dtests=false \
    -Dexamples=false -Dbench=false -Dtools=false -Dmpi=disabled >"$scratch/old-abi.log" 2>&1; then
  echo "FAIL: configuring with a libtorch of the old ABI failed"
  tail -n 20 "$scratch/old-abi.log"
  exit 1
fi
if ! grep -q -- "-D_GLIBCXX_USE_CXX11_ABI=0" "$build/build.ninja"; then
  echo "FAIL: ruda_torch is not built with -D_GLIBCXX_USE_CXX11_ABI=0 for a libtorch of the old ABI"
  exit 1
fi
echo "accepted $scratch/old-abi: built with -D_GLIBCXX_USE_CXX11_ABI=0"
