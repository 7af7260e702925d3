// A fenced resource shared by processes, in a directory: every hold is
// recorded, and overlapping holds or a token not above the last are
// caught by the resource itself, not by anyone's clock.
//
// - `held` is created with O_EXCL at the start of a hold and removed at its
//   end: a second holder's create fails (EEXIST) if the first is inside.
// - `counter` is read, then written back plus one after a pause: with
//   overlapping holds, increments are lost.
// - `tokens` gets each holder's token appended (O_APPEND), in the order
//   the holds happened: it must increase strictly.
import fs from 'node:fs';
import path from 'node:path';

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class FencedFiles {
  constructor(dir) {
    this.dir = dir;
    this.held = path.join(dir, 'held');
    this.counter = path.join(dir, 'counter');
    this.tokens = path.join(dir, 'tokens');
    this.overlaps = 0;
  }

  init() {
    fs.writeFileSync(this.counter, '0');
    fs.writeFileSync(this.tokens, '');
    return this;
  }

  /** One hold with `token`, holding for about `ms`. */
  async hold(token, ms) {
    let fd;
    try {
      fd = fs.openSync(this.held, 'wx');
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      this.overlaps += 1;
    }
    fs.appendFileSync(this.tokens, `${token}\n`);
    const n = Number(fs.readFileSync(this.counter, 'utf8'));
    await pause(ms);
    fs.writeFileSync(this.counter, String(n + 1));
    if (fd !== undefined) {
      fs.closeSync(fd);
      fs.unlinkSync(this.held);
    }
  }

  count() {
    return Number(fs.readFileSync(this.counter, 'utf8'));
  }

  tokenLog() {
    return fs.readFileSync(this.tokens, 'utf8').split('\n').filter(Boolean).map(BigInt);
  }
}
