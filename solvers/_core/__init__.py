"""What every solver family shares: the input door (`problem`), option checks (`params`),
progress and result records with the monitor (`progress`), and compiled CSR row kernels
(`sparse`)."""
