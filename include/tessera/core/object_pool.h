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

// Note [Pooled blocks' thread-locals]
// The list a thread pops from is a constinit, trivially destructible
// thread-local in the initial-exec model, so each allocate and release reads
// it with one instruction: a thread-local with a destructor would carry a
// guard read through __tls_get_addr on every use (four calls per tensor made
// and freed). The list is emptied at thread exit by a second thread-local,
// the Reaper, which the first allocation on a thread arms.
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
    if (!l.armed) [[unlikely]] arm();
    void* p = std::malloc(Size < sizeof(Node) ? sizeof(Node) : Size);
    if (!p) throw std::bad_alloc();
    return p;
  }
  static void release(void* p) {
    List& l = list();
    if (l.count >= kMaxCached || !l.armed) {  // unarmed: the thread is exiting, or never allocated here
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
    bool armed = false;   // the Reaper is registered for this thread
    bool reaped = false;  // and has run: the thread is exiting, blocks go back to malloc
  };
  struct Reaper {
    ~Reaper() {
      List& l = list();
      l.armed = false;
      l.reaped = true;
      while (l.head) {
        Node* n = l.head->next;
        std::free(l.head);
        l.head = n;
      }
      l.count = 0;
    }
  };
  static List& list() {
    __attribute__((tls_model("initial-exec"))) constinit thread_local List l;
    return l;
  }
  [[gnu::noinline]] static void arm() {
    if (list().reaped) return;
    thread_local Reaper reaper;
    (void)reaper;
    list().armed = true;
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
