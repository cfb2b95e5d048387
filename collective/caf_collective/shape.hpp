// A tensor's shape: its extents, one per dimension.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <vector>

namespace caf_collective {

/// The extents of a tensor, outermost first; empty for a scalar.
///
/// Behaves like `std::vector<int64_t>` for what shapes need (build, compare,
/// index, iterate, append) and converts to and from it. Up to `inline_dims`
/// extents live inside the object: a `tensor_view` is built on every call of
/// the API, and with a vector each view cost an allocation and a free: the
/// two views of an 8 B allreduce took 0.04 of its 0.28 us at one rank
/// (docs/benchmarks.md, "Views without an allocation"). Longer shapes go to
/// the heap.
///
/// CAF serializes it as a sequence (begin, end, size, clear and insert), on
/// the wire exactly like the vector it replaced.
class shape_type {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  static constexpr size_t inline_dims = 6;

  // User-provided (not "= default"), so that `const shape_type s;` compiles
  // although the inline extents stay uninitialized.
  shape_type() noexcept {}

  shape_type(std::initializer_list<int64_t> extents) {
    assign(extents.begin(), extents.end());
  }

  template<std::input_iterator InputIt>
  shape_type(InputIt first, InputIt last) {
    assign(first, last);
  }

  // Implicit, so that code written against the former vector still works.
  shape_type(const std::vector<int64_t>& extents) {
    assign(extents.begin(), extents.end());
  }

  shape_type(const shape_type& other) { assign(other.begin(), other.end()); }

  shape_type(shape_type&& other) noexcept { take(other); }

  shape_type& operator=(const shape_type& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }

  shape_type& operator=(shape_type&& other) noexcept {
    if (this != &other) {
      heap_.reset();
      take(other);
    }
    return *this;
  }

  ~shape_type() = default;

  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  // Implicit, for the same reason as the constructor from a vector.
  operator std::vector<int64_t>() const { return to_vector(); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  int64_t* data() noexcept { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const noexcept { return heap_ ? heap_.get() : inline_; }

  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }

  int64_t& operator[](size_t i) noexcept { return data()[i]; }
  int64_t operator[](size_t i) const noexcept { return data()[i]; }

  int64_t front() const noexcept { return data()[0]; }
  int64_t back() const noexcept { return data()[size_ - 1]; }

  void clear() noexcept { size_ = 0; }

  void push_back(int64_t extent) {
    reserve(size_ + 1);
    data()[size_++] = extent;
  }

  /// Inserts `extent` before `pos`; returns where it went.
  iterator insert(const_iterator pos, int64_t extent) {
    auto index = static_cast<size_t>(pos - begin());
    reserve(size_ + 1);
    auto* first = data();
    std::move_backward(first + index, first + size_, first + size_ + 1);
    first[index] = extent;
    ++size_;
    return first + index;
  }

  friend bool operator==(const shape_type& x, const shape_type& y) noexcept {
    return std::equal(x.begin(), x.end(), y.begin(), y.end());
  }

  friend bool operator!=(const shape_type& x, const shape_type& y) noexcept {
    return !(x == y);
  }

 private:
  size_t capacity() const noexcept {
    return heap_ ? heap_capacity_ : inline_dims;
  }

  void reserve(size_t wanted) {
    if (wanted <= capacity()) return;
    auto grown = std::max(wanted, 2 * capacity());
    auto bigger = std::make_unique<int64_t[]>(grown);
    std::copy(begin(), end(), bigger.get());
    heap_ = std::move(bigger);
    heap_capacity_ = grown;
  }

  template<class InputIt>
  void assign(InputIt first, InputIt last) {
    clear();
    for (; first != last; ++first)
      push_back(static_cast<int64_t>(*first));
  }

  void take(shape_type& other) noexcept {
    size_ = other.size_;
    heap_capacity_ = other.heap_capacity_;
    heap_ = std::move(other.heap_);
    if (!heap_) std::copy(other.inline_, other.inline_ + size_, inline_);
    other.size_ = 0;
  }

  size_t size_ = 0;
  size_t heap_capacity_ = 0;
  std::unique_ptr<int64_t[]> heap_; // null while the extents fit inline_
  // Left uninitialized: only the first size_ extents are ever read.
  int64_t inline_[inline_dims];
};

} // namespace caf_collective
