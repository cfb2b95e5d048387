// Must NOT compile: the driver's typed view does not accept a string, so
// CAF rejects the send at compile time. CTest builds this file and passes
// when the compiler reports exactly that (tests/actors/CMakeLists.txt).
#include <string>

#include <caf/all.hpp>

#include <caf_collective/interfaces.hpp>

void send_a_wrong_request(caf::scoped_actor& self,
                          const caf_collective::driver_api& driver) {
  self->send(driver, std::string{"allreduce please"});
}
