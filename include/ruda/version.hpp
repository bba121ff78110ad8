// The ruda version, kept equal to the version in CMakeLists.txt and meson.build (a test checks).
#pragma once

#define RUDA_VERSION_MAJOR 0
#define RUDA_VERSION_MINOR 1
#define RUDA_VERSION_PATCH 0
#define RUDA_VERSION_STRING "0.1.0"
