"""What every lesson imports: claims and verdicts, the skip manifest, devices and the doctor, timing, notebook I/O."""
