// The settings of LK-GP (core/learner/lk_gp_posterior.h): its ridge, its lambda schedule and
// its grid phase. A header of its own so that the model's options can hold them.
#ifndef GRAPHBANDIT_CORE_LEARNER_LK_GP_OPTIONS_H_
#define GRAPHBANDIT_CORE_LEARNER_LK_GP_OPTIONS_H_

#include <cstdint>

namespace graphbandit {

struct LkGpOptions {
  double ridge = 0.1;  // lambda when there is no schedule
  bool schedule = false;
  double lambda_base = 0.01;
  double spectral_ratio = 1.0;  // S_spec of the user graph (see SpectralRatio)
  int64_t horizon = 3000;       // T of the schedule (a reference horizon for open-ended use)
  double lambda_min = 1e-6;
  double lambda_max = 1e-1;
  int64_t first_epoch = 200;
  double rebuild_threshold = 0.2;
  bool grid = false;  // use the grid phase once a pool is declared
  int64_t switch_cap = 1500;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_LK_GP_OPTIONS_H_
