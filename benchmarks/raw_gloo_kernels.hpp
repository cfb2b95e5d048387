// Gloo's own element-wise kernels for a reduce_op, in both of its calling
// conventions (options API and legacy ReductionFunction).
#pragma once

#include <cstddef>
#include <stdexcept>

#include <gloo/algorithm.h>
#include <gloo/math.h>

#include "caf_collective/reduce_op.hpp"

namespace caf_collective::bench {

using gloo_kernel = void (*)(void*, const void*, const void*, size_t);

template<class T>
gloo_kernel options_kernel(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return static_cast<gloo_kernel>(&gloo::sum<T>);
    case reduce_op::product: return static_cast<gloo_kernel>(&gloo::product<T>);
    case reduce_op::min: return static_cast<gloo_kernel>(&gloo::min<T>);
    case reduce_op::max: return static_cast<gloo_kernel>(&gloo::max<T>);
    default: throw std::invalid_argument("raw Gloo has no kernel for this op");
  }
}

template<class T>
const gloo::ReductionFunction<T>* legacy_kernel(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return gloo::ReductionFunction<T>::sum;
    case reduce_op::product: return gloo::ReductionFunction<T>::product;
    case reduce_op::min: return gloo::ReductionFunction<T>::min;
    case reduce_op::max: return gloo::ReductionFunction<T>::max;
    default: throw std::invalid_argument("raw Gloo has no kernel for this op");
  }
}

} // namespace caf_collective::bench
