//! The loss stage: decides, per arriving packet, whether the path loses it.
//!
//! Stateless Bernoulli loss or the two-state Gilbert-Elliott chain of [`LossModel`]. Draws come
//! from the direction's seeded RNG, one or two per packet in a fixed order, so a run is a pure
//! function of the seed and the arrival sequence. Never looks at packet contents or time.

use rand::Rng;

use crate::spec::LossModel;

/// Per-direction loss state.
#[derive(Debug, Clone)]
pub(crate) struct Loss {
    model: Option<LossModel>,
    bad: bool,
}

impl Loss {
    pub(crate) fn new(model: Option<LossModel>) -> Loss {
        Loss { model, bad: false }
    }

    /// Whether [`Loss::lose`] draws from the RNG (and may lose a packet).
    pub(crate) fn draws(&self) -> bool {
        match self.model {
            None => false,
            Some(LossModel::Bernoulli { p }) => p > 0.0,
            Some(LossModel::GilbertElliott { .. }) => true,
        }
    }

    /// True if this packet is lost. Gilbert-Elliott: the current state decides, then the chain
    /// moves (one draw for each).
    pub(crate) fn lose(&mut self, rng: &mut impl Rng) -> bool {
        match self.model {
            None => false,
            Some(LossModel::Bernoulli { p }) => p > 0.0 && rng.random::<f64>() < p,
            Some(LossModel::GilbertElliott { p, r, h, k }) => {
                let deliver = if self.bad { h } else { k };
                let lost = rng.random::<f64>() >= deliver;
                let flip = if self.bad { r } else { p };
                if rng.random::<f64>() < flip {
                    self.bad = !self.bad;
                }
                lost
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn no_model_and_zero_probability_never_lose() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut none = Loss::new(None);
        let mut zero = Loss::new(Some(LossModel::Bernoulli { p: 0.0 }));
        assert!((0..10_000).all(|_| !none.lose(&mut rng) && !zero.lose(&mut rng)));
    }

    #[test]
    fn certain_loss_loses_everything() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut all = Loss::new(Some(LossModel::Bernoulli { p: 1.0 }));
        assert!((0..10_000).all(|_| all.lose(&mut rng)));
    }

    #[test]
    fn gilbert_with_k_one_never_loses_in_good_state() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut ge = Loss::new(Some(LossModel::GilbertElliott { p: 0.0, r: 1.0, h: 0.0, k: 1.0 }));
        assert!((0..10_000).all(|_| !ge.lose(&mut rng)));
    }
}
