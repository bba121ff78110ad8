// Everything public in ruda, in one include.
#pragma once

#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/async_device.hpp>
#include <ruda/backend/backend.hpp>
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/backend/host_tensor.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/optim/async_snapshot.hpp>
#include <ruda/optim/gradients_params_record.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/optim/record_serialization.hpp>
#include <ruda/optim/snapshot_options.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/record/precision.hpp>
#include <ruda/record/tensor_serialization.hpp>
#include <ruda/runtime/blocking_scope.hpp>
#include <ruda/runtime/error_mapping.hpp>
#include <ruda/runtime/gather.hpp>
#include <ruda/runtime/try_read_sync.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/half.hpp>
#include <ruda/tensor/quant_scheme.hpp>
#include <ruda/tensor/tensor_data.hpp>
#include <ruda/version.hpp>
