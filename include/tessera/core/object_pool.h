#pragma once
// Per-thread free lists for small, frequently created objects (TensorImpl,
// Storage, autograd metadata). Creating a tensor on the eager hot path then
// costs a pointer pop instead of a malloc/free pair. Each thread keeps at most
// kMaxCached blocks per type; blocks freed on another thread join that
// thread's list (they are plain heap blocks of the same size).
#include <cstddef>
#include <cstdlib>
#include <new>

namespace tessera {

template <size_t Size>
class BlockPool {
 public:
  static void* allocate() {
    List& l = list();
    if (l.head) {
      Node* n = l.head;
      l.head = n->next;
      --l.count;
      return n;
    }
    void* p = std::malloc(Size < sizeof(Node) ? sizeof(Node) : Size);
    if (!p) throw std::bad_alloc();
    return p;
  }
  static void release(void* p) {
    List& l = list();
    if (l.count >= kMaxCached) {
      std::free(p);
      return;
    }
    Node* n = static_cast<Node*>(p);
    n->next = l.head;
    l.head = n;
    ++l.count;
  }

 private:
  static constexpr size_t kMaxCached = 4096;
  struct Node {
    Node* next;
  };
  struct List {
    Node* head = nullptr;
    size_t count = 0;
    ~List() {
      while (head) {
        Node* n = head->next;
        std::free(head);
        head = n;
      }
    }
  };
  static List& list() {
    __attribute__((tls_model("initial-exec"))) thread_local List l;
    return l;
  }
};

// Gives a class pooled operator new/delete.
#define TS_POOLED(Class)                                                                     \
  static void* operator new(size_t n) {                                                      \
    return n == sizeof(Class) ? ::tessera::BlockPool<sizeof(Class)>::allocate() : ::operator new(n); \
  }                                                                                          \
  static void operator delete(void* p, size_t n) {                                           \
    if (n == sizeof(Class)) ::tessera::BlockPool<sizeof(Class)>::release(p);                 \
    else ::operator delete(p);                                                               \
  }

}  // namespace tessera
