//! Single-key commands for live views (`tcptail top`): the terminal on stdin goes to
//! non-canonical, no-echo mode so a key acts without Enter, and is restored when the view
//! ends, including by Ctrl-C (which becomes a quit key instead of killing the process with
//! the terminal still in that mode).

use std::io::{IsTerminal, Read};
use std::sync::mpsc::Sender;

use rustix::termios::{LocalModes, OptionalActions, Termios, tcgetattr, tcsetattr};

/// The key a Ctrl-C turns into.
pub const QUIT: char = 'q';

/// Keys typed on the terminal, while this lives.
pub struct Keys {
    saved: Option<Termios>,
}

impl Keys {
    /// Sends every key typed on stdin to `tx` (and [`QUIT`] on Ctrl-C). Without a terminal on
    /// stdin nothing is read and nothing changes.
    pub fn start(tx: Sender<char>) -> std::io::Result<Keys> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(Keys { saved: None });
        }
        let saved = tcgetattr(&stdin)?;
        let mut raw = saved.clone();
        raw.local_modes -= LocalModes::ICANON | LocalModes::ECHO;
        tcsetattr(&stdin, OptionalActions::Now, &raw)?;
        let keys = Keys { saved: Some(saved) };
        let on_signal = tx.clone();
        // SIGINT still arrives (ISIG stays on); it quits through the loop so Drop restores.
        ctrlc::set_handler(move || {
            let _ = on_signal.send(QUIT);
        })
        .map_err(std::io::Error::other)?;
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            while std::io::stdin().lock().read(&mut byte).is_ok_and(|n| n == 1) {
                if tx.send(char::from(byte[0])).is_err() {
                    break;
                }
            }
        });
        Ok(keys)
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, saved);
        }
    }
}
