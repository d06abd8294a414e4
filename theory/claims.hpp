// The registry of claims: each file registers its claims in ledger order.
#pragma once

#include "core/error_model.hpp"
#include "theory/claim.hpp"

namespace qkvlab::theory {

void register_attention_claims(std::vector<Claim>& claims);
void register_model_claims(std::vector<Claim>& claims);
void register_norm_claims(std::vector<Claim>& claims);
void register_rmt_claims(std::vector<Claim>& claims);
void register_absorb_claims(std::vector<Claim>& claims);
void register_scale_claims(std::vector<Claim>& claims);
void register_extension_claims(std::vector<Claim>& claims);
void register_fdim_claims(std::vector<Claim>& claims);
void register_skipv1_claims(std::vector<Claim>& claims);
void register_resformer_claims(std::vector<Claim>& claims);

}  // namespace qkvlab::theory
