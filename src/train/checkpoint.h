// Training checkpoints: a GGUF file holding the trainable tensors, their
// AdamW moments (<name>.adam_m / .adam_v), the optimizer step, the loss
// history and the run's settings (JSON). Written atomically: a kill at any
// instant leaves the previous checkpoint whole. A resumed run continues with
// exactly the state an uninterrupted run had at that step.
#pragma once

#include "train/params.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace toy::train {

struct CheckpointState {
    int64_t step = 0;              // optimizer steps done
    nlohmann::json settings;       // the run's settings (train/run.h)
    std::vector<float> train_loss; // one per step done
    std::vector<int64_t> val_steps;
    std::vector<float> val_loss;
    uint64_t data_hash = 0;        // of the training windows, to refuse other data on resume
};

void save_checkpoint(const std::string &path, const ParamSet &params, const CheckpointState &st);
// Fills the parameters' values and moments; throws toy::Error (one line) when
// the file is not a checkpoint, is corrupt, or does not match `params`.
CheckpointState load_checkpoint(const std::string &path, ParamSet &params);
// The run settings a checkpoint was written with (same checks as loading).
nlohmann::json checkpoint_settings(const std::string &path);

// The newest "checkpoint-<step>.gguf" in `dir` (empty when none).
std::string latest_checkpoint(const std::string &dir);
// Removes all but the newest `keep` checkpoints in `dir`.
void prune_checkpoints(const std::string &dir, int keep);
std::string checkpoint_name(const std::string &dir, int64_t step);

}  // namespace toy::train
