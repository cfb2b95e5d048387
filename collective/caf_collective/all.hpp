// The collective layer: `#include <caf_collective/all.hpp>` and
// `namespace col = caf_collective;`. Not the object collectives
// (broadcast_object & co.): include caf_collective/object_collectives.hpp
// for those, which brings CAF's serialization headers along.
#pragma once

#include "caf_collective/api.hpp"
#include "caf_collective/backend.hpp"
#include "caf_collective/device.hpp"
#include "caf_collective/dlpack.hpp"
#include "caf_collective/dtype.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/group.hpp"
#include "caf_collective/host_memory.hpp"
#include "caf_collective/launch.hpp"
#include "caf_collective/nccl_multigpu.hpp"
#include "caf_collective/op_history.hpp"
#include "caf_collective/op_kind.hpp"
#include "caf_collective/options.hpp"
#include "caf_collective/persistent_op.hpp"
#include "caf_collective/reduce_op.hpp"
#include "caf_collective/rendezvous.hpp"
#include "caf_collective/tensor.hpp"
#include "caf_collective/work.hpp"
