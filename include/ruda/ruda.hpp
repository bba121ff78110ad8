// Everything public in ruda, in one include.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/half.hpp>
#include <ruda/tensor/quant_scheme.hpp>
#include <ruda/tensor/tensor_data.hpp>
#include <ruda/version.hpp>
