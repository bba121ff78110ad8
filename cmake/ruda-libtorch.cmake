# libtorch found directly in its root directory (include/ and lib/: a libtorch archive, or the
# `torch` directory of PyTorch's Python package), not through libtorch's CMake package (Torch).
# That package, for a libtorch with CUDA, enables CUDA in the project that finds it and fails
# without nvcc and the CUDA toolkit, which ruda never needs: it opens the CUDA driver at run time.
#
# ruda_find_installed_libtorch(BUILT_WITH), for an installed ruda's package, finds libtorch as
# that ruda was built with it (below).
#
# ruda_import_libtorch(ROOT) defines the imported target `torch`, as the package does, and sets
# in the caller's scope what the package sets and ruda reads: Torch_FOUND, Torch_VERSION,
# TORCH_INSTALL_PREFIX, TORCH_INCLUDE_DIRS, TORCH_CXX_FLAGS, TORCH_LIBRARY, TORCH_LIBRARIES and,
# for a libtorch with CUDA, TORCH_CUDA_LIBRARIES. Where ROOT is not a libtorch, Torch_FOUND is
# false and RUDA_LIBTORCH_ERROR says what is missing.

function(ruda_import_libtorch root)
  set(Torch_FOUND FALSE PARENT_SCOPE)
  set(headers "${root}/include" "${root}/include/torch/csrc/api/include")
  set(version_header "${root}/include/torch/csrc/api/include/torch/version.h")
  if(NOT EXISTS "${root}/include/ATen/ATen.h" OR NOT EXISTS "${version_header}")
    string(CONCAT error "${root} has no libtorch headers (include/ATen/ATen.h and "
                  "include/torch/csrc/api/include/torch/version.h)")
    set(RUDA_LIBTORCH_ERROR "${error}" PARENT_SCOPE)
    return()
  endif()
  set(libraries "")
  foreach(name IN ITEMS torch torch_cpu c10)
    unset(library)
    find_library(library ${name} PATHS "${root}/lib" NO_DEFAULT_PATH NO_CACHE)
    if(NOT library)
      set(RUDA_LIBTORCH_ERROR "${root}/lib has no lib${name}.so" PARENT_SCOPE)
      return()
    endif()
    list(APPEND libraries "${library}")
  endforeach()
  list(GET libraries 2 c10)

  file(STRINGS "${version_header}" version_lines REGEX "define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
  set(version "")
  foreach(part IN ITEMS MAJOR MINOR PATCH)
    string(REGEX MATCH "TORCH_VERSION_${part} ([0-9]+)" found "${version_lines}")
    list(APPEND version "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN version "." version)

  # The libstdc++ ABI libtorch was built with (PyTorch's packages used the old one before 2.7):
  # the new one's symbols carry __cxx11, and c10 has strings among its arguments.
  file(STRINGS "${c10}" new_abi_symbol REGEX "__cxx11" LIMIT_COUNT 1)
  if(new_abi_symbol)
    set(abi 1)
  else()
    set(abi 0)
  endif()

  set(cuda_libraries "")
  foreach(name IN ITEMS c10_cuda torch_cuda)
    unset(library)
    find_library(library ${name} PATHS "${root}/lib" NO_DEFAULT_PATH NO_CACHE)
    if(library)
      list(APPEND cuda_libraries "${library}")
    endif()
  endforeach()

  if(NOT TARGET torch)
    add_library(torch INTERFACE IMPORTED)
    set_target_properties(torch PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${headers}"
      INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${abi}"
      INTERFACE_LINK_LIBRARIES "${libraries}")
  endif()
  set(Torch_FOUND TRUE PARENT_SCOPE)
  set(Torch_VERSION "${version}" PARENT_SCOPE)
  set(TORCH_INSTALL_PREFIX "${root}" PARENT_SCOPE)
  set(TORCH_INCLUDE_DIRS "${headers}" PARENT_SCOPE)
  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=${abi}" PARENT_SCOPE)
  list(GET libraries 0 torch_library)
  set(TORCH_LIBRARY "${torch_library}" PARENT_SCOPE)
  set(TORCH_LIBRARIES torch PARENT_SCOPE)
  set(TORCH_CUDA_LIBRARIES "${cuda_libraries}" PARENT_SCOPE)
endfunction()

# libtorch for an installed ruda: in the directory it was built against (BUILT_WITH), or the one
# the consumer's own RUDA_LIBTORCH_DIR names; through libtorch's CMake package where BUILT_WITH
# is empty. A macro, as find_package's variables must reach the caller. Where no libtorch is
# found, Torch_FOUND is false and RUDA_LIBTORCH_ERROR says why.
macro(ruda_find_installed_libtorch built_with)
  set(_ruda_libtorch_dir "${built_with}")
  if(_ruda_libtorch_dir AND RUDA_LIBTORCH_DIR)
    set(_ruda_libtorch_dir "${RUDA_LIBTORCH_DIR}")
  endif()
  if(_ruda_libtorch_dir)
    ruda_import_libtorch("${_ruda_libtorch_dir}")
    set(RUDA_LIBTORCH_ERROR "RUDA_LIBTORCH_DIR: ${RUDA_LIBTORCH_ERROR}")
  else()
    find_package(Torch QUIET)
    set(RUDA_LIBTORCH_ERROR "libtorch's CMake package (Torch) was not found")
  endif()
  unset(_ruda_libtorch_dir)
endmacro()
