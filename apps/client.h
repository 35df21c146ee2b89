#pragma once
// `tessera client`: one quick request to a running `tessera serve`.
#include <string>
#include <vector>

struct ClientFlags {
  std::string model, url = "http://127.0.0.1:8000", api_key_file, version;
  std::vector<std::string> inputs;  // .npy files, one per model input in order
  int repeat = 1;
};

int cmd_client(const ClientFlags& flags);
