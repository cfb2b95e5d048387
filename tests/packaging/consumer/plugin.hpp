// consumer_plugin: a shared library of the consumer built on caf-collective.
#pragma once

/// Forms a one-rank group, runs one allreduce and destroys the group; true
/// when the result is right. Throws what the library throws.
bool consumer_plugin_allreduce();
